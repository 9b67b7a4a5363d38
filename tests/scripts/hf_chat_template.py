#!/usr/bin/env python3
"""Renders chat templates as transformers' apply_chat_template does (transformers/utils/
chat_template_utils.py): Jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
the loopcontrols extension and the {% generation %} tag, transformers' own tojson filter, and the
globals raise_exception and strftime_now (SOURCE_DATE_EPOCH pins its clock, as the project's does).

Input (argv[1], JSON): [{"template": str, "variables": {...}}, ...]. Output (stdout, JSON): one
{"text": str} or {"error": str} per case. Used by tests/unit-jinja.cpp and tests/unit-hf-oracle.cpp
as the reference the project's interpreter is compared with."""
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):  # transformers' {% generation %} tag: renders its body
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    now = datetime.datetime.fromtimestamp(int(epoch)) if epoch else datetime.datetime.now()
    return now.strftime(format)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        try:
            out.append({"text": env.from_string(case["template"]).render(**case["variables"])})
        except Exception as e:  # noqa: BLE001 - any failure is reported to the caller
            out.append({"error": type(e).__name__ + ": " + str(e)})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
