#!/usr/bin/env python3
"""A small Python client of `llm serve` (the llm.v1.Llm gRPC API), needing only grpcio.

As a program:
    python3 llm_client.py generate --server localhost:50051 --prompt "Hello" --max-tokens 32
    python3 llm_client.py generate --prompt-ids 1,2,3 --temperature 0 --unary --json
    python3 llm_client.py tokenize --text "Hello"
    python3 llm_client.py info
    python3 llm_client.py health

As a module:
    from llm_client import LlmClient
    client = LlmClient("localhost:50051")
    for part in client.generate(prompt="Hello", max_tokens=32):
        print(part.text, end="", flush=True)

The Python stubs are generated from proto/llm/v1/llm.proto the first time they are needed (into a
cache folder named after the proto's hash), with grpcio-tools when it is installed, else with
`protoc` and `grpc_python_plugin` (Debian: protobuf-compiler, protobuf-compiler-grpc). Set
LLM_PROTO_DIR to use another copy of the proto folder.
"""

import argparse
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import grpc
except ImportError as _missing:  # a Python without grpcio (e.g. a virtualenv or pyenv beside Debian's)
    _MESSAGE = (f"llm_client.py needs grpcio, which {sys.executable} does not have: "
                "`pip install grpcio` for this Python, or run Debian's /usr/bin/python3 with "
                "`apt install python3-grpcio`. (Without grpc, any OpenAI SDK or plain HTTP client works "
                "against `llm serve --http-port`.)")
    if __name__ == "__main__":
        print(_MESSAGE, file=sys.stderr)
        sys.exit(2)
    raise ImportError(_MESSAGE) from _missing

PROTO = "llm/v1/llm.proto"


def _proto_root():
    if os.environ.get("LLM_PROTO_DIR"):
        return Path(os.environ["LLM_PROTO_DIR"])
    return Path(__file__).resolve().parents[3] / "proto"  # server/clients/python -> repo root


def load_stubs():
    """Returns the generated (llm_pb2, llm_pb2_grpc) modules, generating them when needed."""
    root = _proto_root()
    source = (root / PROTO).read_bytes()
    out = Path(tempfile.gettempdir()) / ("llm_v1_stubs_" + hashlib.sha256(source).hexdigest()[:16])
    if not (out / "llm" / "v1" / "llm_pb2_grpc.py").exists():
        staging = Path(tempfile.mkdtemp(prefix="llm_v1_stubs_"))
        _generate(root, staging)
        try:
            staging.rename(out)
        except OSError:  # another process made it first
            shutil.rmtree(staging, ignore_errors=True)
    if str(out) not in sys.path:
        sys.path.insert(0, str(out))
    return importlib.import_module("llm.v1.llm_pb2"), importlib.import_module("llm.v1.llm_pb2_grpc")


def _generate(root, out):
    try:
        from grpc_tools import protoc  # pip install grpcio-tools

        args = ["protoc", f"-I{root}", f"--python_out={out}", f"--grpc_python_out={out}", PROTO]
        if protoc.main(args) != 0:
            raise RuntimeError(f"grpc_tools.protoc failed on {root / PROTO}")
        return
    except ImportError:
        pass
    plugin = shutil.which("grpc_python_plugin")
    if not shutil.which("protoc") or not plugin:
        raise RuntimeError("generating the stubs needs grpcio-tools, or protoc and grpc_python_plugin")
    subprocess.run(["protoc", f"-I{root}", f"--python_out={out}", f"--grpc_out={out}",
                    f"--plugin=protoc-gen-grpc={plugin}", PROTO], check=True)


class LlmClient:
    """One channel to a server; each method is one call."""

    def __init__(self, address="localhost:50051", api_key=None, tls_ca=None):
        """api_key: the server's --api-key (default: $LLM_API_KEY); tls_ca: a PEM file to trust (TLS)."""
        self.pb, grpc_stubs = load_stubs()
        if tls_ca:
            with open(tls_ca, "rb") as f:
                self.channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(f.read()))
        else:
            self.channel = grpc.insecure_channel(address)
        self.stub = grpc_stubs.LlmStub(self.channel)
        api_key = api_key or os.environ.get("LLM_API_KEY")
        self.metadata = (("authorization", f"Bearer {api_key}"),) if api_key else None

    def request(self, prompt=None, prompt_ids=None, max_tokens=16, temperature=None, top_k=None, top_p=None,
                min_p=None, repetition_penalty=None, presence_penalty=0.0, frequency_penalty=0.0, seed=None,
                stop=(), stop_token_ids=(), ignore_eos=False, min_tokens=0, logprobs=0, priority=0,
                request_id=""):
        """Builds a GenerateRequest: give exactly one of prompt (text) and prompt_ids. Sampling fields
        left None take the server's defaults (the model's generation_config.json); top_k -1 is off."""
        if (prompt is None) == (prompt_ids is None):
            raise ValueError("give exactly one of prompt and prompt_ids")
        r = self.pb.GenerateRequest(request_id=request_id, top_logprobs=logprobs, priority=priority)
        if prompt is not None:
            r.text = prompt.encode("utf-8")
        else:
            r.token_ids.ids.extend(prompt_ids)
        for field, value in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p), ("min_p", min_p),
                             ("repetition_penalty", repetition_penalty)):
            if value is not None:
                setattr(r.sampling, field, value)
        r.sampling.presence_penalty = presence_penalty
        r.sampling.frequency_penalty = frequency_penalty
        if seed is not None:
            r.sampling.seed = seed
        r.stopping.max_tokens = max_tokens
        r.stopping.min_tokens = min_tokens
        r.stopping.ignore_eos = ignore_eos
        r.stopping.stop.extend(s.encode("utf-8") for s in stop)
        r.stopping.stop_token_ids.extend(stop_token_ids)
        return r

    def generate(self, timeout=None, **kwargs):
        """Streams GenerateResponse messages; the last has finish_reason, usage and timings."""
        return self.stub.Generate(self.request(**kwargs), timeout=timeout, metadata=self.metadata)

    def complete(self, timeout=None, **kwargs):
        """The whole result in one GenerateResponse (unary Complete)."""
        return self.stub.Complete(self.request(**kwargs), timeout=timeout, metadata=self.metadata)

    def tokenize(self, text, add_special_tokens=True):
        request = self.pb.TokenizeRequest(text=text.encode("utf-8"), add_special_tokens=add_special_tokens)
        return list(self.stub.Tokenize(request, metadata=self.metadata).token_ids)

    def detokenize(self, token_ids, skip_special_tokens=False):
        request = self.pb.DetokenizeRequest(token_ids=token_ids, skip_special_tokens=skip_special_tokens)
        return self.stub.Detokenize(request, metadata=self.metadata).text

    def model_info(self):
        return self.stub.ModelInfo(self.pb.ModelInfoRequest(), metadata=self.metadata)

    def health(self):  # exempt from the API key, as on the server
        """The grpc.health.v1 overall status: "SERVING", "NOT_SERVING" or "UNKNOWN".

        Called without generated stubs: the request is an empty message and the answer has one
        varint field (1: status)."""
        check = self.channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda r: r,
                                         response_deserializer=lambda data: data)
        data = check(b"", timeout=5)
        status = data[1] if len(data) >= 2 and data[0] == 0x08 else 0
        return {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING"}.get(status, "UNKNOWN")


def _finish_reason(pb, value):
    return pb.FinishReason.Name(value).removeprefix("FINISH_REASON_").lower()


def _as_json(pb, r):
    return {
        "request_id": r.request_id,
        "token_ids": list(r.token_ids),
        "text": r.text,
        "finish_reason": _finish_reason(pb, r.finish_reason),
        "usage": {"prompt_tokens": r.usage.prompt_tokens, "completion_tokens": r.usage.completion_tokens,
                  "preemptions": r.usage.preemptions, "cached_prompt_tokens": r.usage.cached_prompt_tokens},
        "timings_ms": {"queue": r.timings.queue_ms, "time_to_first_token": r.timings.time_to_first_token_ms,
                       "decode": r.timings.decode_ms, "total": r.timings.total_ms},
        "logprobs": [{"token_id": lp.token_id, "logprob": lp.logprob,
                      "top": [{"token_id": t.token_id, "logprob": t.logprob} for t in lp.top]}
                     for lp in r.logprobs],
    }


def _ids(text):
    return [int(x) for x in text.split(",") if x.strip()]


def _run_generate(client, args):
    kwargs = dict(max_tokens=args.max_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                  min_p=args.min_p, repetition_penalty=args.repetition_penalty, presence_penalty=args.presence_penalty,
                  frequency_penalty=args.frequency_penalty, min_tokens=args.min_tokens,
                  stop_token_ids=_ids(args.stop_token_ids), seed=args.seed, stop=args.stop,
                  ignore_eos=args.ignore_eos, logprobs=args.logprobs, priority=args.priority,
                  request_id=args.request_id)
    if args.prompt is not None:
        kwargs["prompt"] = args.prompt
    else:
        kwargs["prompt_ids"] = _ids(args.prompt_ids)
    pb = client.pb
    # A model without a tokenizer answers token ids only: print those instead of text.
    show_ids = not args.json and not client.model_info().has_tokenizer
    if args.unary:
        total = client.complete(timeout=args.timeout, **kwargs)
        if not args.json:
            print("".join(f"[{t}]" for t in total.token_ids) if show_ids else total.text)
    else:
        total = pb.GenerateResponse()
        for part in client.generate(timeout=args.timeout, **kwargs):
            text = part.text
            total.token_ids.extend(part.token_ids)
            total.logprobs.extend(part.logprobs)
            total.text += text
            if part.finish_reason:
                total.finish_reason = part.finish_reason
                total.usage.CopyFrom(part.usage)
                total.timings.CopyFrom(part.timings)
            total.request_id = part.request_id
            if not args.json:
                print("".join(f"[{t}]" for t in part.token_ids) if show_ids else text, end="", flush=True)
        if not args.json:
            print()
    if args.json:
        print(json.dumps(_as_json(pb, total), ensure_ascii=False))
    else:
        if args.logprobs:  # asked for: printed, never dropped
            print(json.dumps({"logprobs": _as_json(pb, total)["logprobs"]}))
        print(f"[finish: {_finish_reason(pb, total.finish_reason)}; {total.usage.prompt_tokens} prompt + "
              f"{total.usage.completion_tokens} generated tokens; first token "
              f"{total.timings.time_to_first_token_ms:.1f} ms, total {total.timings.total_ms:.1f} ms]",
              file=sys.stderr)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Client of `llm serve` (llm.v1.Llm over gRPC).")
    parser.add_argument("--server", default="localhost:50051", help="the server's gRPC address, HOST:PORT")
    parser.add_argument("--api-key", help="the server's --api-key (default: $LLM_API_KEY)")
    parser.add_argument("--tls-ca", help="connect with TLS, trusting this PEM certificate")
    commands = parser.add_subparsers(dest="command", required=True)
    g = commands.add_parser("generate", help="generate from a prompt (streamed; --unary for one response)")
    prompt = g.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", help="prompt text (the model needs a tokenizer)")
    prompt.add_argument("--prompt-ids", help="prompt as comma-separated token ids")
    g.add_argument("--max-tokens", type=int, default=16)
    g.add_argument("--temperature", type=float, help="0 is greedy (unset: the model's default)")
    g.add_argument("--top-k", type=int, help="keep the k most likely tokens (0 or -1: off)")
    g.add_argument("--top-p", type=float)
    g.add_argument("--min-p", type=float)
    g.add_argument("--repetition-penalty", type=float)
    g.add_argument("--presence-penalty", type=float, default=0.0)
    g.add_argument("--frequency-penalty", type=float, default=0.0)
    g.add_argument("--min-tokens", type=int, default=0)
    g.add_argument("--stop-token-ids", default="", help="comma-separated token ids that end generation")
    g.add_argument("--seed", type=int)
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument("--ignore-eos", action="store_true")
    g.add_argument("--logprobs", type=int, default=0, help="top log-probabilities per token (0-20)")
    g.add_argument("--priority", type=int, default=0)
    g.add_argument("--request-id", default="")
    g.add_argument("--timeout", type=float, help="the call's deadline in seconds")
    g.add_argument("--timeout-ms", type=int, help="the call's deadline in milliseconds (as llm_client's)")
    g.add_argument("--unary", action="store_true", help="call Complete instead of streaming Generate")
    g.add_argument("--json", action="store_true", help="print the result as one JSON object")
    t = commands.add_parser("tokenize", help="token ids of a text")
    t.add_argument("--text", required=True)
    t.add_argument("--no-special-tokens", action="store_true")
    d = commands.add_parser("detokenize", help="text of token ids")
    d.add_argument("--ids", required=True, help="comma-separated token ids")
    d.add_argument("--skip-special-tokens", action="store_true")
    commands.add_parser("info", help="what the server serves")
    commands.add_parser("health", help="the grpc.health.v1 status; exit 0 only when SERVING")
    args = parser.parse_args(argv)

    client = LlmClient(args.server, api_key=args.api_key, tls_ca=args.tls_ca)
    if getattr(args, "timeout_ms", None):
        args.timeout = args.timeout_ms / 1000
    try:
        if args.command == "generate":
            _run_generate(client, args)
        elif args.command == "tokenize":
            print(json.dumps({"token_ids": client.tokenize(args.text, not args.no_special_tokens)}))
        elif args.command == "detokenize":
            print(client.detokenize(_ids(args.ids), args.skip_special_tokens))
        elif args.command == "info":
            print(client.model_info(), end="")
        elif args.command == "health":
            status = client.health()
            print(status)
            return 0 if status == "SERVING" else 1
    except grpc.RpcError as e:
        print(f"llm_client.py: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
