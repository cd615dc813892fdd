"""Write the ONNX message schema that graphmem/wire.c parses by, from onnx's own descriptors.

wire.c reads a few fields of a few messages into Python data; protobuf reads every field
of every message. To parse exactly as protobuf does (which field numbers are known, with
which wire types, which are sub-messages it must walk and check, which are packed, which
enum values are known), wire.c carries a table of all of onnx-ml.proto. This script
writes that table between the markers in wire.c; tests/test_wire.py checks that the
table there is what the installed onnx gives.

    python -m tools.upstream.wire_schema          # rewrite the table in graphmem/wire.c
    python -m tools.upstream.wire_schema --check  # exit 1 if it differs
"""
from __future__ import annotations

import argparse
import sys

from tools import ROOT

WIRE_C = ROOT / "graphmem" / "wire.c"
BEGIN = "/* BEGIN schema (tools/upstream/wire_schema.py writes this block; do not edit) */\n"
END = "/* END schema */\n"

# descriptor field type -> wire.c kind
VARINT, FIXED64, FIXED32, LEN, MESSAGE = "K_VARINT", "K_FIXED64", "K_FIXED32", "K_LEN", "K_MESSAGE"
KIND = {1: FIXED64, 2: FIXED32, 3: VARINT, 4: VARINT, 5: VARINT, 6: FIXED64, 7: FIXED32,
        8: VARINT, 9: LEN, 11: MESSAGE, 12: LEN, 13: VARINT, 14: VARINT, 15: FIXED32,
        16: FIXED64, 17: VARINT, 18: VARINT}


def _messages(descriptors):
    for m in descriptors:
        yield m
        yield from _messages(m.nested_types)


def _c_name(full_name: str) -> str:
    return "M_" + full_name.removeprefix("onnx.").replace(".", "_")


def schema_block() -> str:
    """The C text of the schema of the installed onnx's ModelProto file."""
    import onnx
    file = onnx.ModelProto.DESCRIPTOR.file
    messages = sorted(_messages(file.message_types_by_name.values()), key=lambda m: m.full_name)
    enums = {}
    lines = [BEGIN, f"/* every message of {file.name} */\n"]
    lines.append("enum {\n" + "".join(f"    {_c_name(m.full_name)},\n" for m in messages)
                 + "    M_COUNT\n};\n")
    for m in messages:
        rows = []
        for f in sorted(m.fields, key=lambda f: f.number):
            if f.type == 10:
                raise SystemExit(f"{m.full_name}.{f.name}: groups are not in ONNX's schema")
            sub = _c_name(f.message_type.full_name) if f.message_type else "-1"
            enum = -1
            if f.enum_type is not None:
                enum = enums.setdefault(f.enum_type.full_name, (len(enums), f.enum_type))[0]
            # protobuf 5.28+ has is_repeated; older versions only label
            repeated = int(f.is_repeated if hasattr(f, "is_repeated")
                           else f.label == f.LABEL_REPEATED)
            rows.append(f"    {{{f.number}, {KIND[f.type]}, {repeated}, {sub}, {enum}}},"
                        f" /* {f.name} */\n")
        lines.append(f"static const sfield_t F_{_c_name(m.full_name)[2:]}[] = {{\n"
                     + "".join(rows) + "};\n")
        numbers = sorted(f.number for f in m.fields)
        where = {n: i for i, n in enumerate(numbers)}
        lines.append(f"static const int8_t I_{_c_name(m.full_name)[2:]}[] = {{"
                     + ", ".join(str(where.get(n, -1)) for n in range(numbers[-1] + 1))
                     + "};\n")
    lines.append("static const smsg_t SCHEMA[M_COUNT] = {\n" + "".join(
        f"    [{_c_name(m.full_name)}] = {{F_{_c_name(m.full_name)[2:]}, "
        f"I_{_c_name(m.full_name)[2:]}, {max(f.number for f in m.fields)}, "
        f"\"{m.full_name.removeprefix('onnx.')}\"}},\n" for m in messages) + "};\n")
    lines.append("/* whether v is a value of the (closed, proto2) enum numbered e above */\n"
                 "static int enum_known(int e, int32_t v)\n{\n    switch (e) {\n")
    for index, enum in sorted(enums.values(), key=lambda x: x[0]):
        values = sorted({v.number for v in enum.values})
        lines.append(f"    case {index}: /* {enum.full_name} */\n"
                     f"        switch (v) {{\n"
                     + "".join(f"        case {v}:\n" for v in values)
                     + "            return 1;\n        }\n        return 0;\n")
    lines.append("    }\n    return 0;\n}\n")
    lines.append(END)
    return "".join(lines)


def current_block(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if wire.c's table differs")
    args = ap.parse_args(argv)
    text = WIRE_C.read_text()
    want = schema_block()
    if args.check:
        if current_block(text) != want:
            print("graphmem/wire.c: its schema differs from the installed onnx's; "
                  "run python -m tools.upstream.wire_schema", file=sys.stderr)
            return 1
        return 0
    WIRE_C.write_text(text.replace(current_block(text), want))
    return 0


if __name__ == "__main__":
    sys.exit(main())
