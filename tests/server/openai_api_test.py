#!/usr/bin/env python3
"""End to end tests of `llm serve`'s OpenAI-compatible HTTP API, through real sockets.

The requests are what the OpenAI Python SDK (1.x) puts on the wire: POST with
`Content-Type: application/json`, `Accept: application/json`, `Authorization: Bearer <key>` (the
SDK always sends one), and the JSON body of `client.completions.create(...)` /
`client.chat.completions.create(...)`; streamed answers are read as the SDK's SSE decoder reads
them (events separated by a blank line, `data:` fields joined, the stream ending at
`data: [DONE]`); errors are read as the SDK maps them (the HTTP status picks the exception class,
`error.message` its text). Each answer is checked against a reference computed another way: the
same request not streamed, the same request through gRPC (`llm_client`), the same prompt's
chat template rendered by `llm chat-template`, and curl.

    openai_api_test.py --llm build/bin/llm --client build/bin/llm_client --model launch/model
"""

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ARGS = None


class Server:
    """`llm serve` on free ports; stdout is read until the "serving" line."""

    def __init__(self, *extra, model=None, wait=True):
        self.log = tempfile.NamedTemporaryFile(prefix="llm_serve_", suffix=".log", delete=False)
        cmd = [ARGS.llm, "serve", "--model", model or ARGS.model, "--port", "0", "--http-port", "0",
               "--threads", "2", *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.out = ""
        if wait:
            self.wait_serving()

    def wait_serving(self):
        deadline = time.time() + 120
        while "llm serve: serving" not in self.out:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"llm serve exited: {self.out}\n{self.stderr()}")
            self.out += line
            if time.time() > deadline:
                raise AssertionError("llm serve did not come up")
        self.grpc = re.search(r" on (127\.0\.0\.1:\d+); HTTP", self.out).group(1)
        m = re.search(r"HTTP (https?)://127\.0\.0\.1:(\d+)", self.out)
        self.scheme, self.port = m.group(1), int(m.group(2))

    def stderr(self):
        with open(self.log.name) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.log.close()
        os.unlink(self.log.name)


class Client:
    """What the OpenAI SDK sends and reads, over http.client."""

    def __init__(self, port, api_key="EMPTY", context=None):
        self.port, self.api_key, self.context = port, api_key, context

    def connect(self):
        if self.context:
            return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=120)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def headers(self):
        h = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "OpenAI/Python 1.0",
             "X-Stainless-Lang": "python"}
        if self.api_key is not None:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def request(self, method, path, body=None, raw=None):
        """(status, parsed JSON or text) of a whole response."""
        conn = self.connect()
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, body=data, headers=self.headers())
        r = conn.getresponse()
        text = r.read().decode()
        conn.close()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, text

    def post(self, path, body):
        return self.request("POST", path, body)

    def stream(self, path, body, on_event=None):
        """(status, [events], done) of a streamed request; on_event(i, event) may return False to stop."""
        conn = self.connect()
        conn.request("POST", path, body=json.dumps(body), headers=self.headers())
        r = conn.getresponse()
        if r.status != 200:
            return r.status, json.loads(r.read()), False
        assert r.getheader("Content-Type").startswith("text/event-stream"), r.getheader("Content-Type")
        events, done = [], False
        for data in sse_events(r):
            if data == "[DONE]":
                done = True
                break
            events.append(json.loads(data))
            if on_event and on_event(len(events) - 1, events[-1]) is False:
                break
        conn.close()
        return r.status, events, done


def sse_events(response):
    """The `data` of each server-sent event, as the SDKs' decoder assembles them."""
    data = []
    while True:
        line = response.readline()
        if not line:
            return
        line = line.decode().rstrip("\r\n")
        if line == "":
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            if field == "data":
                data.append(value[1:] if value.startswith(" ") else value)


def stream_text(events, index=0, chat=False):
    parts = []
    for e in events:
        for c in e["choices"]:
            if c["index"] == index:
                parts.append(c["delta"].get("content") or "" if chat else c["text"])
    return "".join(parts)


def finish_reason(events, index=0):
    reasons = [c["finish_reason"] for e in events for c in e["choices"] if c["index"] == index and c["finish_reason"]]
    assert len(reasons) == 1, reasons
    return reasons[0]


def metrics(port, context=None):
    client = Client(port, context=context)
    status, text = client.request("GET", "/metrics")
    assert status == 200
    values = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        name, value = line.rsplit(" ", 1)
        values[re.sub(r'model_name="[^"]*",?', "", name).replace("{}", "")] = float(value)
    return values


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    return p.returncode, p.stdout, p.stderr


def grpc_generate(server, *flags, env=None):
    code, out, err = run([ARGS.client, "generate", "--server", server.grpc, "--json", *flags], env=env)
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1])


class OpenAiApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("--max-seqs", "8")
        cls.client = Client(cls.server.port)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_models_and_health(self):
        status, models = self.client.request("GET", "/v1/models")
        self.assertEqual(status, 200)
        self.assertEqual(models["object"], "list")
        self.assertEqual([m["id"] for m in models["data"]], ["model"])
        self.assertEqual(models["data"][0]["object"], "model")
        self.assertEqual(self.client.request("GET", "/v1/models/model")[0], 200)
        self.assertEqual(self.client.request("GET", "/health")[0], 200)
        # Without --api-key, any key (the SDK always sends one) or none is fine.
        self.assertEqual(Client(self.server.port, api_key=None).request("GET", "/v1/models")[0], 200)

    def test_completion_streamed_equals_plain_and_grpc(self):
        body = {"model": "model", "prompt": "The command", "max_tokens": 24, "temperature": 0, "ignore_eos": True}
        status, plain = self.client.post("/v1/completions", body)
        self.assertEqual(status, 200, plain)
        self.assertEqual(plain["object"], "text_completion")
        self.assertTrue(plain["id"].startswith("cmpl-"))
        choice = plain["choices"][0]
        self.assertEqual(choice["finish_reason"], "length")
        self.assertEqual(plain["usage"]["completion_tokens"], 24)
        self.assertEqual(plain["usage"]["total_tokens"], plain["usage"]["prompt_tokens"] + 24)

        status, events, done = self.client.stream("/v1/completions", dict(body, stream=True,
                                                                            stream_options={"include_usage": True}))
        self.assertEqual(status, 200)
        self.assertTrue(done)
        self.assertEqual(stream_text(events), choice["text"])
        self.assertEqual(finish_reason(events), "length")
        self.assertEqual(events[-1]["choices"], [])
        self.assertEqual(events[-1]["usage"], plain["usage"])
        self.assertTrue(all(e["usage"] is None for e in events[:-1]))
        self.assertEqual(len({e["id"] for e in events}), 1)

        # The same request through gRPC: the same text and token count.
        grpc = grpc_generate(self.server, "--prompt", "The command", "--max-tokens", "24", "--temperature", "0",
                             "--ignore-eos")
        self.assertEqual(grpc["text"], choice["text"])
        self.assertEqual(grpc["usage"]["completion_tokens"], 24)
        self.assertEqual(grpc["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"])

    def test_prefix_cache_reports_cached_tokens_and_salts_separate(self):
        # 80 token ids: five full blocks of 16. Sent again, the first four come from the cache (the
        # block with the last prompt token is always computed); another salt finds nothing.
        prompt = [5 + (i * 7) % 300 for i in range(80)]
        body = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "ignore_eos": True, "cache_salt": "tenant-1"}
        answers = []
        for salt in ["tenant-1", "tenant-1", "tenant-2"]:
            status, answer = self.client.post("/v1/completions", dict(body, cache_salt=salt))
            self.assertEqual(status, 200, answer)
            answers.append(answer)
        cached = [a["usage"]["prompt_tokens_details"]["cached_tokens"] for a in answers]
        self.assertEqual(cached, [0, 64, 0])
        self.assertEqual(len({a["choices"][0]["text"] for a in answers}), 1)

    def test_token_id_prompts_and_logprobs_match_grpc(self):
        body = {"prompt": [1, 5, 9, 33, 7], "max_tokens": 6, "temperature": 0, "logprobs": 2, "ignore_eos": True}
        status, plain = self.client.post("/v1/completions", body)
        self.assertEqual(status, 200, plain)
        lp = plain["choices"][0]["logprobs"]
        self.assertEqual(len(lp["tokens"]), 6)
        self.assertEqual(len(lp["token_logprobs"]), 6)
        self.assertTrue(all(len(t) <= 2 for t in lp["top_logprobs"]))
        self.assertEqual("".join(lp["tokens"]), plain["choices"][0]["text"])
        self.assertEqual(lp["text_offset"][0], 0)
        grpc = grpc_generate(self.server, "--prompt-ids", "1,5,9,33,7", "--max-tokens", "6", "--temperature", "0",
                             "--logprobs", "2", "--ignore-eos")
        # The same tokens: gRPC's ids, each detokenized alone, are HTTP's token strings.
        self.assertEqual(len(grpc["token_ids"]), 6)
        for token, token_id in zip(lp["tokens"], grpc["token_ids"]):
            code, out, err = run([ARGS.client, "detokenize", "--server", self.server.grpc, "--ids", str(token_id)])
            self.assertEqual(code, 0, err)
            self.assertEqual(out[:-1], token)
        for mine, theirs in zip(lp["token_logprobs"], grpc["logprobs"]):
            self.assertAlmostEqual(mine, theirs["logprob"], places=4)
            # The sampled token is the most likely one (greedy): first of the top list.
            self.assertAlmostEqual(max(lp["top_logprobs"][lp["token_logprobs"].index(mine)].values()), mine, places=4)
        # Streamed: the per-chunk logprobs concatenate to the whole.
        status, events, _ = self.client.stream("/v1/completions", dict(body, stream=True))
        streamed = [v for e in events for c in e["choices"] if c["logprobs"] for v in c["logprobs"]["token_logprobs"]]
        self.assertEqual(streamed, lp["token_logprobs"])

    def test_logit_bias_over_http_and_grpc(self):
        body = {"prompt": [1, 5, 9, 33, 7], "max_tokens": 4, "temperature": 0, "ignore_eos": True}
        free = grpc_generate(self.server, "--prompt-ids", "1,5,9,33,7", "--max-tokens", "4", "--temperature", "0",
                             "--ignore-eos")
        first = free["token_ids"][0]
        # Banning the first greedy token and lifting another: both APIs give the same new output.
        biased = grpc_generate(self.server, "--prompt-ids", "1,5,9,33,7", "--max-tokens", "4", "--temperature", "0",
                               "--ignore-eos", "--logit-bias", f"{first}:-100,42:4.5")
        self.assertNotEqual(biased["token_ids"][0], first)
        self.assertNotIn(first, biased["token_ids"])
        status, plain = self.client.post("/v1/completions", dict(body, logit_bias={str(first): -100, "42": 4.5}))
        self.assertEqual(status, 200, plain)
        self.assertEqual(plain["choices"][0]["text"], biased["text"])
        # +100 forces a token at every step, streamed too.
        forced = dict(body, logit_bias={"42": 100}, stream=True)
        status, events, _ = self.client.stream("/v1/completions", forced)
        code, out, err = run([ARGS.client, "detokenize", "--server", self.server.grpc, "--ids", "42,42,42,42"])
        self.assertEqual(code, 0, err)
        self.assertEqual(stream_text(events), out[:-1])

    def test_chat_plain_streamed_and_rendered_prompt(self):
        messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"}]
        body = {"model": "model", "messages": messages, "max_tokens": 16, "temperature": 0, "ignore_eos": True}
        status, plain = self.client.post("/v1/chat/completions", body)
        self.assertEqual(status, 200, plain)
        self.assertEqual(plain["object"], "chat.completion")
        message = plain["choices"][0]["message"]
        self.assertEqual(message["role"], "assistant")
        status, events, done = self.client.stream("/v1/chat/completions", dict(body, stream=True))
        self.assertTrue(done)
        self.assertEqual(events[0]["object"], "chat.completion.chunk")
        self.assertEqual(events[0]["choices"][0]["delta"]["role"], "assistant")
        self.assertEqual(stream_text(events, chat=True), message["content"])
        self.assertEqual(finish_reason(events), "length")
        # The reference: the conversation rendered by `llm chat-template`, completed from its ids.
        request = os.path.join(tempfile.mkdtemp(), "request.json")
        with open(request, "w") as f:
            json.dump({"messages": messages, "add_generation_prompt": True}, f)
        template = os.path.join(ARGS.model, "chat_template.jinja")
        code, out, err = run([ARGS.llm, "chat-template", "--template", template, "--tokenizer",
                              os.path.join(ARGS.model, "tokenizer.json"), "--bos-token", "<s>", "--eos-token", "</s>",
                              "--request", request])
        self.assertEqual(code, 0, err)
        ids = json.loads(out)["ids"]
        self.assertEqual(plain["usage"]["prompt_tokens"], len(ids))
        status, completion = self.client.post("/v1/completions", {"prompt": ids, "max_tokens": 16, "temperature": 0,
                                                                  "ignore_eos": True})
        self.assertEqual(completion["choices"][0]["text"], message["content"])

    def test_chat_logprobs(self):
        body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}], "max_tokens": 4,
                "temperature": 0, "logprobs": True, "top_logprobs": 3, "ignore_eos": True}
        status, plain = self.client.post("/v1/chat/completions", body)
        self.assertEqual(status, 200, plain)
        content = plain["choices"][0]["logprobs"]["content"]
        self.assertEqual(len(content), 4)
        for entry in content:
            self.assertEqual(set(entry), {"token", "logprob", "bytes", "top_logprobs"})
            self.assertEqual(len(entry["top_logprobs"]), 3)
            self.assertEqual(bytes(entry["bytes"]).decode(errors="replace"), entry["token"])
            self.assertAlmostEqual(entry["top_logprobs"][0]["logprob"], entry["logprob"], places=5)

    def test_stop_strings_and_n(self):
        status, free = self.client.post("/v1/completions", {"prompt": "The command", "max_tokens": 24,
                                                            "temperature": 0, "ignore_eos": True})
        text = free["choices"][0]["text"]
        stop = text[8:11]
        self.assertTrue(stop.strip(), text)
        body = {"prompt": "The command", "max_tokens": 24, "temperature": 0, "stop": [stop]}
        status, stopped = self.client.post("/v1/completions", body)
        self.assertEqual(stopped["choices"][0]["text"], text[:text.index(stop)])
        self.assertEqual(stopped["choices"][0]["finish_reason"], "stop")
        status, events, _ = self.client.stream("/v1/completions", dict(body, stream=True))
        self.assertEqual(stream_text(events), text[:text.index(stop)])
        self.assertEqual(finish_reason(events), "stop")
        # n choices with a seed: each repeatable, indexed 0..n-1; usage counts the prompt once.
        body = {"prompt": "The command", "max_tokens": 8, "temperature": 1.0, "seed": 5, "n": 3, "ignore_eos": True}
        status, a = self.client.post("/v1/completions", body)
        status, b = self.client.post("/v1/completions", body)
        self.assertEqual([c["index"] for c in a["choices"]], [0, 1, 2])
        self.assertEqual([c["text"] for c in a["choices"]], [c["text"] for c in b["choices"]])
        self.assertEqual(a["usage"]["completion_tokens"], 24)
        self.assertEqual(a["usage"]["prompt_tokens"], free["usage"]["prompt_tokens"])

    def test_errors_have_openai_shape_and_status(self):
        cases = [
            ("/v1/completions", None, "{not json", 400, "not valid JSON"),
            ("/v1/completions", {"prompt": "x", "logit_bias": {"five": 1}}, None, 400, "logit_bias"),
            ("/v1/completions", {"prompt": "x", "logit_bias": {"5": 101}}, None, 400, "logit_bias"),
            ("/v1/completions", {"prompt": "x", "logit_bias": {"5": 1, "05": 2}}, None, 400, "logit_bias"),
            ("/v1/completions", {"prompt": "x", "logit_bias": {"99999999": 1}}, None, 400, "vocabulary"),
            ("/v1/completions", {"prompt": "x", "logit_bias": [5, 1]}, None, 400, "logit_bias"),
            ("/v1/completions", {"prompt": "x", "frobnicate": 1}, None, 400, "frobnicate"),
            ("/v1/completions", {"prompt": "x", "temperature": -1}, None, 400, "temperature"),
            ("/v1/completions", {"prompt": "x", "max_tokens": 100000}, None, 400, "context"),
            ("/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}}, None, 400, "stream"),
            ("/v1/completions", {"prompt": "x", "priority": 5}, None, 400, "priority"),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
             None, 400, "tools"),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                      "response_format": {"type": "json_schema"}}, None, 400, "response_format"),
            ("/v1/chat/completions", {"messages": []}, None, 400, "messages"),
            ("/v1/completions", {"model": "gpt-4", "prompt": "x"}, None, 404, "gpt-4"),
            ("/v1/nothing", {}, None, 404, "no route"),
        ]
        for path, body, raw, want, words in cases:
            with self.subTest(path=path, body=body or raw):
                status, error = self.client.request("POST", path, body, raw=raw)
                self.assertEqual(status, want, error)
                self.assertEqual(set(error), {"error"})
                self.assertEqual(set(error["error"]), {"message", "type", "param", "code"})
                self.assertIn(words, error["error"]["message"])
        self.assertEqual(self.client.request("GET", "/v1/completions")[0], 405)
        # Refused requests are counted; the server goes on serving.
        self.assertGreater(metrics(self.server.port)['llm_requests_rejected_total{code="INVALID_ARGUMENT"}'], 0)
        self.assertEqual(self.client.post("/v1/completions", {"prompt": "x", "max_tokens": 2})[0], 200)

    def test_client_disconnect_cancels_and_frees(self):
        before = metrics(self.server.port)
        body = {"prompt": "The command", "max_tokens": 900, "temperature": 0, "ignore_eos": True, "stream": True}
        status, events, done = self.client.stream("/v1/completions", body, on_event=lambda i, e: i < 2)
        self.assertEqual(status, 200)
        self.assertFalse(done)
        deadline = time.time() + 30
        while time.time() < deadline:
            m = metrics(self.server.port)
            if m['llm_requests_finished_total{finish_reason="cancelled"}'] > \
                    before['llm_requests_finished_total{finish_reason="cancelled"}']:
                break
            time.sleep(0.1)
        self.assertEqual(m['llm_requests_finished_total{finish_reason="cancelled"}'],
                         before['llm_requests_finished_total{finish_reason="cancelled"}'] + 1)
        self.assertEqual(m["llm_kv_cache_blocks_used"], 0)
        self.assertLess(m["llm_generated_tokens_total"] - before["llm_generated_tokens_total"], 900)

    def test_metrics_are_labelled_and_documented_names(self):
        _, text = self.client.request("GET", "/metrics")
        self.assertIn('llm_requests_running{model_name="model"}', text)
        self.assertIn("llm_kv_cache_capacity_blocks", text)
        self.assertNotIn("llm_kv_cache_blocks_total", text)
        for name in ["llm_request_prompt_tokens_bucket", "llm_request_generation_tokens_bucket",
                     "llm_request_prefill_time_seconds_bucket", "llm_request_decode_time_seconds_bucket"]:
            self.assertIn(name + '{model_name="model",le=', text)

    def test_curl_gives_the_same_answers(self):
        curl = shutil.which("curl")
        if not curl:
            self.skipTest("no curl")
        body = {"prompt": "The command", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
        _, plain = self.client.post("/v1/completions", body)
        url = f"http://127.0.0.1:{self.server.port}/v1/completions"
        code, out, err = run([curl, "-sS", "-f", url, "-H", "Content-Type: application/json", "-d", json.dumps(body)])
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["choices"][0]["text"], plain["choices"][0]["text"])
        code, out, err = run([curl, "-sSN", "-f", url, "-H", "Content-Type: application/json",
                              "-d", json.dumps(dict(body, stream=True))])
        self.assertEqual(code, 0, err)
        data = [line[len("data: "):] for line in out.split("\n") if line.startswith("data: ")]
        self.assertEqual(data[-1], "[DONE]")
        self.assertEqual("".join(json.loads(d)["choices"][0]["text"] for d in data[:-1]), plain["choices"][0]["text"])
        code, out, _ = run([curl, "-s", "-o", "/dev/null", "-w", "%{http_code}", url, "-d", "{}"])
        self.assertEqual(out, "400")


class PolicyTest(unittest.TestCase):
    """Servers started with the options a test needs."""

    def test_api_key_on_http_and_grpc_health_exempt(self):
        server = Server("--api-key", "s3cret")
        try:
            self.assertEqual(Client(server.port, api_key=None).request("GET", "/v1/models")[0], 401)
            status, error = Client(server.port, api_key="wrong").post("/v1/completions", {"prompt": "x"})
            self.assertEqual(status, 401)
            self.assertEqual(error["error"]["type"], "authentication_error")
            self.assertEqual(Client(server.port, api_key="s3cret").request("GET", "/v1/models")[0], 200)
            self.assertEqual(Client(server.port, api_key=None).request("GET", "/health")[0], 200)
            self.assertEqual(Client(server.port, api_key=None).request("GET", "/metrics")[0], 200)
            code, _, err = run([ARGS.client, "info", "--server", server.grpc])
            self.assertEqual(code, 1)
            self.assertIn("UNAUTHENTICATED", err)
            code, _, err = run([ARGS.client, "info", "--server", server.grpc, "--api-key", "s3cret"])
            self.assertEqual(code, 0, err)
            code, out, _ = run([ARGS.client, "health", "--server", server.grpc])
            self.assertEqual((code, out.strip()), (0, "SERVING"))
        finally:
            server.stop()

    def test_tls_with_a_self_signed_certificate(self):
        openssl = shutil.which("openssl")
        if not openssl:
            self.skipTest("no openssl")
        folder = tempfile.mkdtemp()
        cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
        code, _, err = run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                            "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                            "-keyout", key, "-out", cert])
        self.assertEqual(code, 0, err)
        server = Server("--tls-cert", cert, "--tls-key", key)
        try:
            self.assertEqual(server.scheme, "https")
            context = ssl.create_default_context(cafile=cert)
            client = Client(server.port, context=context)
            status, plain = client.post("/v1/completions", {"prompt": "The command", "max_tokens": 6,
                                                            "temperature": 0})
            self.assertEqual(status, 200, plain)
            status, events, done = client.stream("/v1/completions", {"prompt": "The command", "max_tokens": 6,
                                                                     "temperature": 0, "stream": True})
            self.assertTrue(done)
            self.assertEqual(stream_text(events), plain["choices"][0]["text"])
            # Plain HTTP on the TLS port gets nothing useful; an untrusting client refuses the server.
            with self.assertRaises(ssl.SSLError):
                Client(server.port, context=ssl.create_default_context()).request("GET", "/health")
            code, out, err = run([ARGS.client, "generate", "--server", f"localhost:{server.grpc.split(':')[1]}",
                                  "--tls-ca", cert, "--prompt", "The command", "--max-tokens", "6",
                                  "--temperature", "0", "--json"])
            self.assertEqual(code, 0, err)
            self.assertEqual(json.loads(out.strip().splitlines()[-1])["text"], plain["choices"][0]["text"])
            code, _, _ = run([ARGS.client, "info", "--server", server.grpc])
            self.assertEqual(code, 1)  # plaintext gRPC against TLS
            curl = shutil.which("curl")
            if curl:
                code, out, err = run([curl, "-sS", "--cacert", cert, f"https://127.0.0.1:{server.port}/health"])
                self.assertEqual((code, out), (0, "{}"), err)
        finally:
            server.stop()

    def test_usage_errors_exit_2_before_listening(self):
        for flags, words in [(["--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.pem"], "--tls-cert"),
                             (["--tls-cert", "/nonexistent.pem"], "go together"),
                             (["--http-port", "70000"], "--http-port"),
                             (["--device", "tpu"], "--device"),
                             (["--generation-config", "/nonexistent"], "--generation-config")]:
            with self.subTest(flags=flags):
                code, out, err = run([ARGS.llm, "serve", "--model", ARGS.model, "--port", "0", "--http-port", "0",
                                      *flags])
                self.assertEqual(code, 2, out + err)
                self.assertIn(words, err)
                self.assertNotIn("listening", out)

    def test_port_in_use_is_an_error(self):
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        try:
            for flag in ["--port", "--http-port"]:
                with self.subTest(flag=flag):
                    other = "--http-port" if flag == "--port" else "--port"
                    code, out, err = run([ARGS.llm, "serve", "--model", ARGS.model, flag, str(port), other, "0"])
                    self.assertEqual(code, 1, out + err)
                    self.assertIn("address already in use", err.lower())
                    self.assertIn(str(port), err)
        finally:
            holder.close()

    def test_generation_config_defaults_apply_to_unset_fields(self):
        folder = tempfile.mkdtemp()
        for name in os.listdir(ARGS.model):
            if name != "generation_config.json":
                os.symlink(os.path.join(os.path.abspath(ARGS.model), name), os.path.join(folder, name))
        with open(os.path.join(folder, "generation_config.json"), "w") as f:
            json.dump({"temperature": 0.0, "top_k": 5, "top_p": 0.5, "repetition_penalty": 1.0}, f)
        body = {"prompt": "The command", "max_tokens": 16, "ignore_eos": True}
        server = Server(model=folder)
        try:
            self.assertIn("temperature=0 top_p=0.5 top_k=5 repetition_penalty=1", server.out)
            client = Client(server.port)
            greedy = client.post("/v1/completions", dict(body, temperature=0))[1]["choices"][0]["text"]
            for seed in (1, 2, 3):
                # No temperature: the model's 0 (greedy), whatever the seed; gRPC the same.
                self.assertEqual(client.post("/v1/completions", dict(body, seed=seed))[1]["choices"][0]["text"], greedy)
            self.assertEqual(grpc_generate(server, "--prompt", "The command", "--max-tokens", "16", "--ignore-eos",
                                           "--seed", "4")["text"], greedy)
        finally:
            server.stop()
        server = Server("--generation-config", "ignore", model=folder)
        try:
            self.assertIn("--generation-config ignore): none", server.out)
            client = Client(server.port)
            texts = {client.post("/v1/completions", dict(body, seed=seed))[1]["choices"][0]["text"] for seed in (1, 2, 3)}
            self.assertGreater(len(texts), 1)  # temperature 1: the seeds differ
        finally:
            server.stop()

    def test_full_queue_is_429_and_draining_is_503(self):
        server = Server("--max-queue", "1", "--max-seqs", "1")
        try:
            client = Client(server.port)
            long = {"prompt": "The command", "max_tokens": 400, "temperature": 0, "ignore_eos": True}
            results = []

            def send():
                results.append(client.post("/v1/completions", long))

            threads = [threading.Thread(target=send) for _ in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            statuses = sorted(r[0] for r in results)
            self.assertIn(429, statuses)
            self.assertIn(200, statuses)
            refused = [r[1] for r in results if r[0] == 429][0]
            self.assertEqual(refused["error"]["type"], "rate_limit_error")
            self.assertIn("queue is full", refused["error"]["message"])
            # Draining: health and new requests answer 503; the running one finishes.
            running = threading.Thread(target=send)
            results.clear()
            running.start()
            deadline = time.time() + 30
            while metrics(server.port).get("llm_requests_running", 0) < 1 and time.time() < deadline:
                time.sleep(0.05)
            server.proc.send_signal(signal.SIGTERM)
            deadline = time.time() + 10
            while client.request("GET", "/health")[0] != 503 and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(client.request("GET", "/health")[0], 503)
            status, error = client.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
            self.assertEqual(status, 503)
            self.assertIn("shutting down", error["error"]["message"])
            running.join()
            self.assertEqual(results[0][0], 200)
            self.assertEqual(results[0][1]["usage"]["completion_tokens"], 400)
            self.assertEqual(server.proc.wait(timeout=60), 0)
        finally:
            server.stop()


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--llm", required=True)
    parser.add_argument("--client", required=True)
    parser.add_argument("--model", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
