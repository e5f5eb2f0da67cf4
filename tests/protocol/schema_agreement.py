#!/usr/bin/env python3
"""The Python client's side of tests/protocol/test_schema.cpp.

Reads lines "request FRAME" and "reply FRAME" (frames the C++ codec encoded) on stdin and checks each
with the Python client's schema, strictly (a field the schema does not name is an error); prints
"ok KIND" or "bad KIND: WHY" for each. Then prints "frame FRAME" for requests the Python client builds:
every request kind with every field of the schema filled (a generate once with a prompt and once with
tokens, which exclude each other), for the C++ decoder to read.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients"))
from hotcold_client import ProtocolError, Schema  # noqa: E402

EXAMPLE = {"string": "some text", "integer": 3, "number": 0.5, "boolean": True, "json": {"type": "string", "maxLength": 8}}


def example(schema, spec):
    base, array, _, _ = schema.parse_type(spec)
    if base in EXAMPLE:
        value = EXAMPLE[base]
    else:
        value = {name: example(schema, s) for name, s in schema.objects[base].items()}
    return [value, value] if array else value


def main():
    schema = Schema(sys.argv[1]) if len(sys.argv) > 1 else Schema()
    for line in sys.stdin:
        direction, _, frame = line.rstrip("\n").partition(" ")
        kind = "?"
        try:
            message = json.loads(frame)
            kind = message.get("type", "?")
            if direction == "request":
                schema.check_request(message)
            else:
                schema.check_reply(message, strict=True)
            print(f"ok {direction} {kind}")
        except (ProtocolError, ValueError) as e:
            print(f"bad {direction} {kind}: {e}")
    for kind, fields in schema.requests.items():
        filled = {name: example(schema, spec) for name, spec in fields.items()}
        variants = [filled]
        if kind == "generate":
            # (prompt or tokens; grammar or json_schema: each pair excludes itself)
            filled["grammar"] = 'root ::= "yes" | "no"'
            filled["messages"] = [{"role": "user", "content": "hi"}]
            filled["tool_choice"] = "auto"
            variants = [{k: v for k, v in filled.items() if k not in ("tokens", "json_schema", "messages", "tools", "tool_choice")},
                        {k: v for k, v in filled.items() if k not in ("prompt", "grammar", "messages", "tools", "tool_choice")},
                        {k: v for k, v in filled.items() if k not in ("prompt", "tokens", "grammar")}]
        for n, v in enumerate(variants):
            print("frame " + json.dumps(schema.request(kind, f"py-{kind}-{n}", **v)))


if __name__ == "__main__":
    main()
