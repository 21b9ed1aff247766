#!/usr/bin/env python3
"""Renders Jinja templates with Python's jinja2 configured exactly as Hugging Face transformers
configures it for chat templates (transformers/utils/chat_template_utils.py,
_cached_compile_jinja_template): ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols]), its tojson filter,
raise_exception and strftime_now globals. The {% generation %} tag renders its body, as
transformers' AssistantTracker does when no tracker is active.

stdin:  {"cases": [{"template": str, "context": {...}}, ...]}
stdout: [{"ok": true, "text": str} | {"ok": false, "error": "ErrorClass", "message": str}, ...]

The reference for tests/chat/jinja_differential_test.cc; exits non-zero when jinja2 is missing.
"""
import json
import sys
from datetime import datetime

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as e:  # fail loudly: the test must not pass without its reference
    sys.stderr.write(f"jinja_reference.py: python3 cannot import jinja2 ({e}); install python3-jinja2\n")
    sys.exit(3)


class GenerationTag(Extension):
    """transformers' AssistantTracker without tracking: {% generation %}body{% endgeneration %}."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _render(self, context, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


# The instant strftime_now() formats: the current time, unless a caller pins it (the references
# of tests/data/chat are rendered at a fixed instant, so that they do not depend on the day).
NOW = None


def strftime_now(format):
    return (NOW or datetime.now()).strftime(format)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# Error classes as the C++ engine names them (engine/chat/template_error.h).
def error_class(e):
    if isinstance(e, RecursionError):
        return "LimitError"
    if isinstance(e, SyntaxError):  # Python's compiler rejecting jinja2's output ('break' outside loop)
        return "TemplateSyntaxError"
    if isinstance(e, jinja2.exceptions.TemplateSyntaxError):  # includes TemplateAssertionError
        return "TemplateSyntaxError"
    if isinstance(e, jinja2.exceptions.UndefinedError):
        return "UndefinedError"
    if isinstance(e, jinja2.exceptions.SecurityError):
        return "SecurityError"
    if isinstance(e, jinja2.exceptions.TemplateRuntimeError):  # includes FilterArgumentError
        return "TemplateRuntimeError"
    if type(e) is jinja2.exceptions.TemplateError:
        return "TemplateError"
    if isinstance(e, ZeroDivisionError):
        return "ZeroDivisionError"
    if isinstance(e, OverflowError):
        return "OverflowError"
    if isinstance(e, (KeyError, IndexError)):
        return "TemplateRuntimeError"
    return type(e).__name__


def render(env, case):
    try:
        text = env.from_string(case["template"]).render(**case.get("context", {}))
        return {"ok": True, "text": text}
    except Exception as e:  # noqa: BLE001 - every error is a result to compare
        return {"ok": False, "error": error_class(e), "message": str(e)[:300]}


def main():
    sys.setrecursionlimit(3000)
    cases = json.load(sys.stdin)["cases"]
    env = make_env()
    json.dump([render(env, c) for c in cases], sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
