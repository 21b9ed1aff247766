#!/usr/bin/env python3
"""Loads an HTTP server the way issue 19 asks the chosen library to hold up, and times what a
monitoring system sees meanwhile:
  streams  N concurrent server-sent-event streams (GET /sse, or POST /v1/completions with
           "stream": true against `llm serve`): how many got their first event within 2 s, how long
           until all ended, and /metrics latency while they run;
  idle     N connections that never send anything: /metrics and /health latency;
  slow     N connections sending a request head at 1 byte/s: /metrics and /health latency.
Only 127.0.0.1; every loop is bounded in count and time.

    measure_connections.py --port 18090 [--completions] [--streams 1000] [--idle 1000] [--slow 1000]
"""

import argparse
import json
import resource
import selectors
import socket
import statistics
import time


def probe(port, path, timeout=5.0):
    """Seconds for one GET (a new connection), or None when it does not answer within `timeout`."""
    start = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        if not data.startswith(b"HTTP/1.1 200"):
            return None
        return time.monotonic() - start
    except OSError:
        return None


def summarize(samples):
    ok = [s * 1000 for s in samples if s is not None]
    missed = len(samples) - len(ok)
    if not ok:
        return f"no answer in {len(samples)} tries"
    return (f"p50 {statistics.median(ok):.1f} ms, max {max(ok):.1f} ms over {len(samples)} probes"
            + (f", {missed} unanswered within 5 s" if missed else ""))


def probes_while(port, seconds, step=0.25):
    samples = {"/metrics": [], "/health": []}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for path in samples:
            samples[path].append(probe(port, path))
        time.sleep(step)
    return samples


def streams(port, n, completions, limit_s):
    if completions:
        body = json.dumps({"prompt": [1, 2, 3, 4], "max_tokens": 64, "temperature": 0, "ignore_eos": True,
                           "stream": True})
        request = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}").encode()
    else:
        request = b"GET /sse HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    sel = selectors.DefaultSelector()
    start = time.monotonic()
    first, done = {}, {}
    for i in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        sel.register(s, selectors.EVENT_WRITE, [i, b"", False])
    metrics, next_probe = [], start
    while len(done) < n and time.monotonic() - start < limit_s:
        for key, mask in sel.select(timeout=0.05):
            i, data, sent = key.data
            if mask & selectors.EVENT_WRITE and not sent:
                try:
                    key.fileobj.sendall(request)
                except OSError:
                    done[i] = None
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
                    continue
                key.data[2] = True
                sel.modify(key.fileobj, selectors.EVENT_READ, key.data)
                continue
            try:
                chunk = key.fileobj.recv(65536)
            except OSError:
                chunk = b""
            if chunk:
                key.data[1] = data = data + chunk
                if i not in first and b"data:" in data:
                    first[i] = time.monotonic() - start
            if not chunk or b"[DONE]" in key.data[1]:
                done[i] = time.monotonic() - start if b"[DONE]" in key.data[1] else None
                sel.unregister(key.fileobj)
                key.fileobj.close()
        if time.monotonic() >= next_probe:
            metrics.append(probe(port, "/metrics"))
            next_probe = time.monotonic() + 0.25
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    completed = [t for t in done.values() if t is not None]
    early = sum(1 for t in first.values() if t <= 2.0)
    print(f"streams: {n} opened; first event within 2 s: {early}; completed: {len(completed)}"
          + (f" (last at {max(completed):.2f} s)" if completed else "")
          + f"; /metrics meanwhile: {summarize(metrics)}")


def idle(port, n, seconds):
    conns = []
    for _ in range(n):
        try:
            conns.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            break
    samples = probes_while(port, seconds)
    print(f"idle: {len(conns)} connections open, sending nothing; " +
          "; ".join(f"{p} {summarize(s)}" for p, s in samples.items()))
    for c in conns:
        c.close()


def slow(port, n, seconds):
    conns = []
    for _ in range(n):
        try:
            c = socket.create_connection(("127.0.0.1", port), timeout=5)
            c.setblocking(False)
            conns.append(c)
        except OSError:
            break
    head = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
    end, sent, samples = time.monotonic() + seconds, 0, {"/metrics": [], "/health": []}
    next_byte = time.monotonic()
    while time.monotonic() < end:
        if time.monotonic() >= next_byte and sent < len(head):
            for c in conns:
                try:
                    c.send(head[sent:sent + 1])
                except OSError:
                    pass
            sent += 1
            next_byte += 1.0
        for path in samples:
            samples[path].append(probe(port, path))
        time.sleep(0.25)
    print(f"slow: {len(conns)} connections sending a request head at 1 byte/s ({sent} bytes each); " +
          "; ".join(f"{p} {summarize(s)}" for p, s in samples.items()))
    for c in conns:
        c.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--completions", action="store_true", help="stream POST /v1/completions (llm serve)")
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--slow", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--stream-limit-s", type=float, default=60)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.streams:
        streams(args.port, args.streams, args.completions, args.stream_limit_s)
    if args.idle:
        idle(args.port, args.idle, args.seconds)
    if args.slow:
        slow(args.port, args.slow, args.seconds)


if __name__ == "__main__":
    main()
