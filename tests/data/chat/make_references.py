#!/usr/bin/env python3
"""Makes tests/data/chat/references.json: published chat templates rendered on many conversations
by the reference implementations, for tests/chat/chat_template_test.cc.

Text: Hugging Face transformers' apply_chat_template when `transformers` is importable (run it on a
machine that has it: `--require-transformers`); otherwise the same rendering reproduced from
transformers' source: jinja2's ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks,
loopcontrols, generation tag) with transformers' tojson / raise_exception / strftime_now, called
with messages, tools, documents=None, add_generation_prompt and the special tokens plus kwargs
(tests/chat/jinja_reference.py holds that environment). Ids: the text encoded with special tokens
recognised and none added, by Hugging Face `tokenizers` 0.23.2 (its Node binding, `npm install
tokenizers@0.23.2`, the same Rust library the Python package wraps) or by transformers.

Each case is an OpenAI-shaped request (what `llm chat-template` and the Chat RPC take); the
transformers input is that request normalized as engine/chat/chat_template.h documents:
tool-call arguments parsed from JSON strings, text parts joined with "\n".

    python3 tests/data/chat/make_references.py --node-modules /path/to/node_modules
"""
import argparse
import copy
import json
import os
import subprocess
import sys
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "chat"))

# name -> template file, tokenizer (tests/data/tokenizers), template variables of the special tokens
TEMPLATES = {
    "llama3-fixture": ("llama3-fixture.jinja", "llama3", {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}),
    "qwen3-fixture": ("qwen3-fixture.jinja", "qwen3", {
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                                      "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
                                      "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
                                      "<|video_pad|>"]}),
    "llama2-chat": ("llama2-chat.jinja", "llama2", {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
    "llama3.3-tools": ("meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3",
                       {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "hermes3-tools": ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "llama3",
                      {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"}),
    "qwq-qwen2.5-tools": ("Qwen-QwQ-32B.jinja", "qwen3", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "granite3.3": ("ibm-granite-granite-3.3-2B-Instruct.jinja", "llama3",
                   {"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>"}),
    "mistral-nemo": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "llama2",
                     {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
    "gemma2": ("google-gemma-2-2b-it.jinja", "llama2", {"bos_token": "<bos>", "eos_token": "<eos>"}),
    "phi3.5": ("microsoft-Phi-3.5-mini-instruct.jinja", "llama2",
               {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>"}),
    "chatml": ("chatml.jinja", "qwen3", {"eos_token": "<|im_end|>"}),
}

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
SEARCH_TOOL = {"type": "function", "function": {
    "name": "search", "description": "Search the web — returns snippets",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer"}},
                   "required": ["query"]}}}


def tool_call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


LONG = ("The quick brown fox jumps over the lazy dog. " * 120).strip()
CONVERSATIONS = {
    "single-user": {"messages": [{"role": "user", "content": "Hello!"}]},
    "system-user": {"messages": [{"role": "system", "content": "You are a terse assistant."},
                                 {"role": "user", "content": "What is 2+2?"}]},
    "multi-turn": {"messages": [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."}, {"role": "assistant", "content": "Why did the chicken cross the road?"},
        {"role": "user", "content": "Why?"}]},
    "no-system-multi-turn": {"messages": [
        {"role": "user", "content": "  padded question  "}, {"role": "assistant", "content": " padded answer "},
        {"role": "user", "content": "next"}]},
    "unicode": {"messages": [{"role": "system", "content": "Réponds en français 🇫🇷."},
                             {"role": "user", "content": "日本語で説明して。emoji 😀👩‍👩‍👧 and ünïcödé \"quotes\" \\ backslash"}]},
    "empty-content": {"messages": [{"role": "user", "content": ""}]},
    "long-content": {"messages": [{"role": "user", "content": LONG}, {"role": "assistant", "content": LONG[:999]},
                                  {"role": "user", "content": "Summarize."}]},
    "text-parts": {"messages": [{"role": "user", "content": [{"type": "text", "text": "first part"},
                                                             {"type": "text", "text": "second part"}]}]},
    "tools-offered": {"messages": [{"role": "user", "content": "Weather in Paris?"}],
                      "tools": [WEATHER_TOOL, SEARCH_TOOL]},
    "tool-call-and-result": {"messages": [
        {"role": "system", "content": "Use tools when useful."},
        {"role": "user", "content": "What's the weather in Paris and in Tokyo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            tool_call("call_1", "get_weather", {"city": "Paris", "unit": "celsius"}),
            tool_call("call_2", "get_weather", {"city": "Tokyo"})]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temperature\": 18}"},
        {"role": "tool", "tool_call_id": "call_2", "name": "get_weather", "content": "{\"temperature\": 25}"},
        {"role": "assistant", "content": "Paris 18°C, Tokyo 25°C."},
        {"role": "user", "content": "Thanks!"}], "tools": [WEATHER_TOOL, SEARCH_TOOL]},
    "tool-call-pending": {"messages": [
        {"role": "user", "content": "Search for llamas"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c9", "search", {"query": "llamas", "k": 3})]},
        {"role": "tool", "tool_call_id": "c9", "name": "search", "content": "Llamas are camelids."}],
        "tools": [SEARCH_TOOL]},
    "thinking-history": {"messages": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nEasy: 4.\n</think>\n\nIt is 4."},
        {"role": "user", "content": "And 3+3?"}]},
    "thinking-disabled": {"messages": [{"role": "user", "content": "Quick answer please"}],
                          "kwargs": {"enable_thinking": False}},
    "reasoning-content": {"messages": [
        {"role": "user", "content": "Why is the sky blue?"},
        {"role": "assistant", "content": "Rayleigh scattering.", "reasoning_content": "Short wavelengths scatter more."},
        {"role": "user", "content": "More detail?"}]},
}
# Templates that read a date: fixed so that references do not depend on the day they were made.
# date_string for those that take it; strftime_now() (e.g. Granite's "Today's Date") formats this
# local time, recorded in references.json for chat_template_test to pin its clock to.
DATE_KWARGS = {"date_string": "26 Jul 2024"}
REFERENCE_NOW = "2026-11-24T12:00:00"


def normalize(request):
    """The OpenAI-shaped request as the template sees it (engine/chat/chat_template.h)."""
    messages = []
    for m in request["messages"]:
        m = copy.deepcopy(m)
        if isinstance(m.get("content"), list):
            m["content"] = "\n".join(p["text"] for p in m["content"] if p.get("type") == "text")
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            if isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.loads(fn["arguments"])
        messages.append(m)
    return messages


def render_with_jinja2(source, special, request, add_generation_prompt):
    import jinja_reference
    jinja_reference.NOW = datetime.fromisoformat(REFERENCE_NOW)
    env = jinja_reference.make_env()
    kwargs = dict(special)
    kwargs.update(DATE_KWARGS)
    kwargs.update(request.get("kwargs", {}))
    try:
        text = env.from_string(source).render(messages=normalize(request), tools=request.get("tools"),
                                              documents=None, add_generation_prompt=add_generation_prompt, **kwargs)
        return {"text": text}
    except Exception as e:  # noqa: BLE001
        return {"error": jinja_reference.error_class(e), "message": str(e)}


class ReferenceClock(datetime):
    """datetime with now() pinned to REFERENCE_NOW, for transformers' strftime_now."""

    @classmethod
    def now(cls, tz=None):
        return datetime.fromisoformat(REFERENCE_NOW)


def render_with_transformers(tokenizer_file, source, special, request, add_generation_prompt):
    from transformers import PreTrainedTokenizerFast
    from transformers.utils import chat_template_utils
    chat_template_utils.datetime = ReferenceClock  # its strftime_now calls datetime.now()
    named = {k: v for k, v in special.items() if k != "additional_special_tokens"}
    tok = PreTrainedTokenizerFast(tokenizer_file=tokenizer_file, **named)
    kwargs = dict(DATE_KWARGS)
    kwargs.update(request.get("kwargs", {}))
    try:
        text = tok.apply_chat_template(normalize(request), tools=request.get("tools"), chat_template=source,
                                       add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs)
        ids = tok.apply_chat_template(normalize(request), tools=request.get("tools"), chat_template=source,
                                      add_generation_prompt=add_generation_prompt, tokenize=True, **kwargs)
        if hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding (a UserDict, not a dict)
            ids = ids["input_ids"]
        return {"text": text, "ids": list(ids)}
    except Exception as e:  # noqa: BLE001
        import jinja_reference
        return {"error": jinja_reference.error_class(e), "message": str(e)}


def encode_with_node(node_modules, jobs):
    """jobs: [(tokenizer_file, text)] -> ids, via the tokenizers Node binding."""
    script = r"""
const { Tokenizer } = require('tokenizers');
const jobs = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const cache = {};
(async () => {
  const out = [];
  for (const [file, text] of jobs) {
    cache[file] = cache[file] || Tokenizer.fromFile(file);
    const enc = await cache[file].encode(text, null, { addSpecialTokens: false });
    out.push(Array.from(enc.getIds()));
  }
  process.stdout.write(JSON.stringify(out));
})();
"""
    env = dict(os.environ, NODE_PATH=node_modules)
    result = subprocess.run(["node", "-e", script], input=json.dumps(jobs).encode(), env=env,
                            capture_output=True, check=True)
    return json.loads(result.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizers-dir", required=True, help="folder with <name>-tokenizer.json files")
    parser.add_argument("--node-modules", help="node_modules holding tokenizers@0.23.2 (without transformers)")
    parser.add_argument("--require-transformers", action="store_true")
    parser.add_argument("--out", default=os.path.join(HERE, "references.json"))
    args = parser.parse_args()
    try:
        import transformers  # noqa: F401
        use_transformers = True
    except ImportError:
        if args.require_transformers:
            sys.exit("make_references.py: transformers is not installed")
        use_transformers = False
        if not args.node_modules:
            sys.exit("make_references.py: without transformers, --node-modules (tokenizers@0.23.2) is required")

    cases = []
    for name, (template_file, tokenizer, special) in TEMPLATES.items():
        source = open(os.path.join(HERE, "templates", template_file), encoding="utf-8").read()
        tokenizer_file = os.path.join(args.tokenizers_dir, f"{tokenizer}-tokenizer.json")
        for conversation, request in CONVERSATIONS.items():
            for add_generation_prompt in (True, False):
                if use_transformers:
                    result = render_with_transformers(tokenizer_file, source, special, request, add_generation_prompt)
                else:
                    result = render_with_jinja2(source, special, request, add_generation_prompt)
                full_request = dict(request, add_generation_prompt=add_generation_prompt)
                full_request["kwargs"] = dict(DATE_KWARGS, **request.get("kwargs", {}))
                cases.append({"template": name, "template_file": template_file, "tokenizer": tokenizer,
                              "special_tokens": special, "conversation": conversation,
                              "request": full_request, **result})
    if not use_transformers:
        jobs = [(os.path.join(args.tokenizers_dir, f"{c['tokenizer']}-tokenizer.json"), c["text"])
                for c in cases if "text" in c]
        ids = iter(encode_with_node(args.node_modules, jobs))
        for c in cases:
            if "text" in c:
                c["ids"] = next(ids)
    generator = ("transformers " + __import__("transformers").__version__ if use_transformers else
                 "jinja2 " + __import__("jinja2").__version__ + " as transformers configures it; tokenizers 0.23.2 (Node)")
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"generator": generator, "strftime_now": REFERENCE_NOW, "cases": cases}, f, ensure_ascii=False,
                  indent=1)
        f.write("\n")
    ok = sum(1 for c in cases if "text" in c)
    print(f"{len(cases)} cases ({ok} rendered, {len(cases) - ok} template errors) -> {args.out}")


if __name__ == "__main__":
    main()
