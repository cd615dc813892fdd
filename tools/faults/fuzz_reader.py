"""Fuzz graphmem's model reader with mutated and generated ONNX files (issue 38).

    python -m tools.faults.fuzz_reader differential --count 5000   # wire.parse_model vs protobuf
    python -m tools.faults.fuzz_reader plan --count 2000 --jobs 2  # `graphmem plan` on each mutant
    python -m tools.faults.fuzz_reader atheris -runs=100000        # coverage-guided (atheris)
    python -m tools.faults.fuzz_reader corpus DIR                  # write the generated cases

Mutants are made from seed models (tests/data/corpus, a zoo graph, hand-built control
flow) by a structure-aware mutator: the file is read into a tree of protobuf fields with
onnx's own descriptors, one or a few fields are changed, and the tree is written back
with every enclosing length fixed, so most mutants reach past the outer messages. The
mutations: truncation at a field boundary (or inside one), varints that overflow (2^32+1,
2^63, -1, 10- and 11-byte encodings), lengths past the end, wrong wire types, groups,
values swapped for others of the model (names, dims, types, enum values), bytes flipped,
fields duplicated (floods of many copies), deleted or moved. Generated cases add what a
mutation of a small file cannot reach: nesting 20,000 levels deep (subgraphs, types,
groups) and repeated fields of millions of entries.

``differential`` parses each mutant with graphmem.wire and with protobuf
(onnx.ModelProto.FromString) and counts where they differ; it prints each difference.
``plan`` runs ``python -m graphmem plan`` on each mutant in a subprocess limited to 2 GB
of address space (RLIMIT_AS) and 20 s, and sorts the outcomes: a plan, one ``graphmem:``
line and exit 2, or a failure (a traceback, more than one line, a signal, a timeout, any
other exit, an over-2-GB run: those end in a MemoryError or a std::bad_alloc), with the
failing files kept (``--keep DIR``). Exit status 1 when anything failed.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tools import ROOT

LIMIT_BYTES = 2 << 30
LIMIT_SECONDS = 20

# ------------------------------------------------------------------ the wire format


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("bad varint")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value & ((1 << 64) - 1), pos


@dataclass
class Field:
    """One field of a message: a varint or fixed value (``value`` int or bytes), bytes
    (``value`` bytes), or a sub-message (``children``)."""

    number: int
    wire_type: int
    value: int | bytes = b""
    children: list["Field"] | None = None
    message: str = ""  # the sub-message's type name, when children is not None


def _descriptor(name: str):
    import onnx
    pool = onnx.ModelProto.DESCRIPTOR.file.pool
    return pool.FindMessageTypeByName("onnx." + name)


def parse(data: bytes, message: str = "ModelProto", depth: int = 0) -> list[Field]:
    """The fields of ``data`` as a tree; sub-messages by onnx's descriptors."""
    desc = _descriptor(message)
    fields, pos = [], 0
    while pos < len(data):
        tag, pos = read_varint(data, pos)
        number, wt = tag >> 3, tag & 7
        if wt == 0:
            value, pos = read_varint(data, pos)
            fields.append(Field(number, wt, value))
        elif wt in (1, 5):
            k = 8 if wt == 1 else 4
            if pos + k > len(data):
                raise ValueError("truncated")
            fields.append(Field(number, wt, data[pos:pos + k]))
            pos += k
        elif wt == 2:
            n, pos = read_varint(data, pos)
            if pos + n > len(data):
                raise ValueError("truncated")
            payload = data[pos:pos + n]
            pos += n
            fd = desc.fields_by_number.get(number)
            if fd is not None and fd.message_type is not None and depth < 200:
                sub = fd.message_type.full_name.removeprefix("onnx.")
                try:
                    fields.append(Field(number, 2, payload, parse(payload, sub, depth + 1), sub))
                    continue
                except ValueError:
                    pass
            fields.append(Field(number, 2, payload))
        else:
            raise ValueError("groups are not kept in the tree")
    return fields


def serialize(fields: list[Field]) -> bytes:
    out = bytearray()
    for f in fields:
        out += varint(f.number << 3 | f.wire_type)
        if f.children is not None:
            payload = serialize(f.children)
            out += varint(len(payload)) + payload
        elif f.wire_type == 0:
            out += varint(f.value) if isinstance(f.value, int) else f.value
        elif f.wire_type == 2:
            out += varint(len(f.value)) + f.value
        else:
            out += f.value
    return bytes(out)


def walk(fields: list[Field], path=()):
    """Every (field, its list, index, depth) in the tree."""
    for i, f in enumerate(fields):
        yield f, fields, i, len(path)
        if f.children is not None:
            yield from walk(f.children, path + (f.number,))


# ------------------------------------------------------------------ mutations

HUGE = [(1 << 32) + 1, (1 << 32) - 1, 1 << 31, (1 << 63) - 1, 1 << 63, (1 << 64) - 1,
        (1 << 62), 0, 1, 2, 3, 20, 255, 1 << 40]


def _strings(tree) -> list[bytes]:
    return [f.value for f, *_ in walk(tree) if f.children is None and f.wire_type == 2
            and isinstance(f.value, bytes) and 0 < len(f.value) < 64]


def _pick(rng: random.Random, tree, pred=lambda f: True):
    found = [x for x in walk(tree) if pred(x[0])]
    return rng.choice(found) if found else None


class Mutator:
    """Structure-aware mutations of one seed model's bytes."""

    def __init__(self, data: bytes):
        self.data = data
        self.tree = parse(data)
        self.strings = _strings(self.tree)

    def mutant(self, rng: random.Random) -> tuple[str, bytes]:
        """A mutated copy of the seed: (what was done, its bytes)."""
        tree = _copy(self.tree)
        names = []
        raw = None
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            kind = rng.choice(KINDS)
            got = kind(self, rng, tree)
            if got is None:
                continue
            if isinstance(got, bytes):  # a raw edit of the written bytes: last
                raw = got
                names.append(kind.__name__)
                break
            names.append(kind.__name__)
        data = raw if raw is not None else serialize(tree)
        return "+".join(names) or "unchanged", data

    # -- changes to the tree --

    def varint_value(self, rng, tree):
        x = _pick(rng, tree, lambda f: f.wire_type == 0)
        if x:
            x[0].value = rng.choice(HUGE + [rng.getrandbits(64), rng.randrange(-5, 40) % (1 << 64)])
            return True

    def varint_encoding(self, rng, tree):
        """A varint written in 10 bytes, or 11 (too long), or with its 10th byte's high bits."""
        x = _pick(rng, tree, lambda f: f.wire_type == 0)
        if x:
            v = x[0].value if isinstance(x[0].value, int) else 0
            groups = [(v >> (7 * i)) & 0x7F for i in range(10)]
            enc = bytes(g | 0x80 for g in groups[:9]) + bytes([groups[9] | rng.choice([0, 0x7E])])
            if rng.random() < 0.3:
                enc = enc[:9] + bytes([enc[9] | 0x80, 0x01])
            x[0].value = enc
            return True

    def wire_type(self, rng, tree):
        x = _pick(rng, tree)
        if x:
            f = x[0]
            new = rng.choice([t for t in (0, 1, 2, 5) if t != f.wire_type])
            if new == 0:
                x[1][x[2]] = Field(f.number, 0, rng.choice(HUGE))
            elif new == 2:
                x[1][x[2]] = Field(f.number, 2, serialize([f]) if f.children is None
                                   else bytes(rng.getrandbits(8) for _ in range(rng.randrange(9))))
            else:
                x[1][x[2]] = Field(f.number, new, bytes(8 if new == 1 else 4))
            return True

    def group(self, rng, tree):
        """An unknown field written as a group (sometimes unterminated or misnested)."""
        x = _pick(rng, tree, lambda f: f.children is not None)
        target = x[0].children if x else tree
        n = rng.choice([3, 30, 1000, 99, 1 << 20])
        inner = rng.choice([b"", varint(1 << 3) + b"\x01", varint(2 << 3 | 2) + b"\x01x"])
        end = varint(n << 3 | 4)
        if rng.random() < 0.2:
            end = rng.choice([b"", varint((n + 1) << 3 | 4)])
        target.insert(rng.randrange(len(target) + 1),
                      Field(n, 3, inner + end))  # serialize writes the tag, then the bytes
        return True

    def swap_string(self, rng, tree):
        x = _pick(rng, tree, lambda f: f.children is None and f.wire_type == 2)
        if x and self.strings:
            x[0].value = rng.choice(self.strings + [b"", b"\xff\xfe", b"a" * 300, b"\x00",
                                                    b"\xe2\x80\xae", b"../../etc/passwd"])
            return True

    def flip_bytes(self, rng, tree):
        x = _pick(rng, tree, lambda f: f.children is None and isinstance(f.value, bytes)
                  and f.value)
        if x:
            b = bytearray(x[0].value)
            for _ in range(rng.randrange(1, 4)):
                b[rng.randrange(len(b))] = rng.getrandbits(8)
            x[0].value = bytes(b)
            return True

    def resize_bytes(self, rng, tree):
        x = _pick(rng, tree, lambda f: f.children is None and f.wire_type == 2)
        if x:
            v = x[0].value
            if rng.random() < 0.5 and v:
                x[0].value = v[:rng.randrange(len(v))]
            else:
                x[0].value = v + bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 17)))
            return True

    def duplicate(self, rng, tree):
        x = _pick(rng, tree)
        if x:
            copies = rng.choice([1, 1, 2, 10, 1000, 20000])
            x[1][x[2] + 1:x[2] + 1] = [_copy([x[0]])[0] for _ in range(copies)]
            return True

    def delete(self, rng, tree):
        x = _pick(rng, tree)
        if x:
            del x[1][x[2]]
            return True

    def move(self, rng, tree):
        """A field copied into another message (of any type)."""
        a, b = _pick(rng, tree), _pick(rng, tree, lambda f: f.children is not None)
        if a and b:
            b[0].children.insert(rng.randrange(len(b[0].children) + 1), _copy([a[0]])[0])
            return True

    def dims(self, rng, tree):
        """A tensor's or a shape's dims set to values a file may hold."""
        x = _pick(rng, tree, lambda f: f.children is not None and f.message in (
            "TensorProto", "TensorShapeProto.Dimension", "TypeProto.Tensor"))
        if not x:
            return None
        f = x[0]
        if f.message == "TensorProto":
            f.children = [c for c in f.children if c.number != 1]
            for d in rng.choice([[-1], [0], [1 << 40], [3, -2], [1 << 62, 4], [], [7] * 40]):
                f.children.append(Field(1, 0, d % (1 << 64)))
        elif f.message == "TensorShapeProto.Dimension":
            f.children = [Field(1, 0, rng.choice(HUGE + [(-1) % (1 << 64)]))]
        else:
            f.children.append(Field(1, 0, rng.choice([0, 16, 20, 40, 1 << 32, 8])))
        return True

    def enum(self, rng, tree):
        """data_location or an attribute's type: any varint (2^32 + 1: EXTERNAL)."""
        x = _pick(rng, tree, lambda f: f.children is not None and f.message in (
            "TensorProto", "AttributeProto"))
        if x:
            number = 14 if x[0].message == "TensorProto" else 20
            x[0].children.append(Field(number, 0, rng.choice(HUGE + [5, 10, 13])))
            return True

    def constant_values(self, rng, tree):
        """A small constant's data (a shape, axes, a count: a Constant node's value or a
        small initializer) replaced: random bytes, values near the int64 limits, one
        byte more or less."""
        x = _pick(rng, tree, lambda f: f.children is not None and f.message == "TensorProto"
                  and any(c.number == 9 and c.children is None and isinstance(c.value, bytes)
                          and 0 < len(c.value) <= 256 for c in f.children))
        if not x:
            return None
        raw = next(c for c in x[0].children if c.number == 9 and isinstance(c.value, bytes)
                   and 0 < len(c.value) <= 256)
        n = len(raw.value)
        pick = rng.random()
        if pick < 0.3:
            raw.value = bytes(rng.getrandbits(8) for _ in range(n))
        elif pick < 0.7:
            values = [rng.choice([(1 << 62), (1 << 63) - 1, -(1 << 63), (1 << 31), -1, 0,
                                  (1 << 40), 3_000_000_000, -2])
                      for _ in range(max(n // 8, 1))]
            raw.value = b"".join(v.to_bytes(8, "little", signed=True) for v in values)[:n]
        else:
            raw.value = raw.value + b"\xff" if rng.random() < 0.5 else raw.value[:-1]
        return True

    # -- raw edits of the written bytes --

    def truncate(self, rng, tree):
        data = serialize(tree)
        bounds = _boundaries(tree)
        cut = rng.choice(bounds) if bounds and rng.random() < 0.7 else rng.randrange(len(data))
        return data[:cut]

    def length_past_end(self, rng, tree):
        data = serialize(tree)
        spots = _length_spots(tree)
        if not spots:
            return None
        pos, old_len, width = rng.choice(spots)
        new = rng.choice([old_len + 1, old_len + 1000, (1 << 31) - 1, 1 << 31, 1 << 32,
                          (1 << 64) - 1, len(data)])
        return data[:pos] + varint(new) + data[pos + width:]

    def splice_bytes(self, rng, tree):
        data = serialize(tree)
        at = rng.randrange(len(data) + 1)
        junk = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 9)))
        return data[:at] + junk + data[at:]


KINDS = [Mutator.varint_value, Mutator.varint_encoding, Mutator.wire_type, Mutator.group,
         Mutator.swap_string, Mutator.swap_string, Mutator.flip_bytes, Mutator.resize_bytes,
         Mutator.duplicate, Mutator.delete, Mutator.move, Mutator.dims, Mutator.dims,
         Mutator.enum, Mutator.truncate, Mutator.length_past_end, Mutator.splice_bytes,
         Mutator.constant_values, Mutator.constant_values, Mutator.constant_values]


def _copy(fields):
    return [Field(f.number, f.wire_type, f.value, _copy(f.children) if f.children is not None
                  else None, f.message) for f in fields]


def _boundaries(tree, base=0) -> list[int]:
    """The offsets of every field's start and end in serialize(tree)."""
    out, pos = [], base
    for f in tree:
        out.append(pos)
        head = varint(f.number << 3 | f.wire_type)
        if f.children is not None:
            payload = serialize(f.children)
            start = pos + len(head) + len(varint(len(payload)))
            out += _boundaries(f.children, start)
            pos = start + len(payload)
        else:
            pos += len(serialize([f]))
        out.append(pos)
    return out


def _length_spots(tree, base=0) -> list[tuple[int, int, int]]:
    """(offset, value, width) of every length varint in serialize(tree)."""
    out, pos = [], base
    for f in tree:
        head = varint(f.number << 3 | f.wire_type)
        if f.wire_type == 2:
            payload = serialize(f.children) if f.children is not None else f.value
            width = len(varint(len(payload)))
            out.append((pos + len(head), len(payload), width))
            if f.children is not None:
                out += _length_spots(f.children, pos + len(head) + width)
            pos += len(head) + width + len(payload)
        else:
            pos += len(serialize([f]))
    return out


# ------------------------------------------------------------------ seeds and generated cases


def seeds() -> dict[str, bytes]:
    """Seed models: the corpus exports, a zoo graph, control flow, small hand-built ones."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    out = {}
    for p in sorted((ROOT / "tests/data/corpus").glob("*.onnx")):
        out[p.stem] = p.read_bytes()
    for p in sorted((ROOT / "tests/data/control_flow").glob("*.onnx")):
        out[p.stem] = p.read_bytes()
    from graphmem.frontend.zoo import zoo_path
    out["squeezenet"] = Path(zoo_path("squeezenet")).read_bytes()
    F = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                               [vi("t", F, [1, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [vi("e", F, [1, 4])])
    small = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Reshape", ["y", "shape"], ["r"]),
         helper.make_node("Expand", ["r", "shape2"], ["e2"]),
         helper.make_node("Tile", ["e2", "reps"], ["z"])],
        "small", [vi("x", F, ["n", 4]), vi("c", TensorProto.BOOL, [])], [vi("z", F, None)],
        [numpy_helper.from_array(np.array([1, 4], np.int64), "shape"),
         numpy_helper.from_array(np.array([2, 4], np.int64), "shape2"),
         numpy_helper.from_array(np.array([1, 2], np.int64), "reps")])
    out["small"] = helper.make_model(small, opset_imports=[helper.make_opsetid("", 17)]
                                     ).SerializeToString()
    return out


def generated(scale: float = 1.0) -> dict[str, bytes]:
    """Cases a mutation of a small file cannot reach: deep nesting, floods (``scale``
    shrinks the floods' millions of entries)."""
    import onnx
    from onnx import TensorProto, helper
    F = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    opset = b"\x42" + varint(len(b"\x10\x11")) + b"\x10\x11"  # opset_import {version: 17}
    head = b"\x08\x08" + opset
    out = {}

    def model(graph: bytes) -> bytes:
        return head + b"\x3a" + varint(len(graph)) + graph

    def entry(number: int, payload: bytes) -> bytes:
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    def nest(core: bytes, levels: int, wrapper: list[tuple[int, bytes]]) -> bytes:
        """``core`` wrapped ``levels`` times in entry(n1, h1 + entry(n2, h2 + ... core)),
        written in linear time (each level's prefix from the length inside it)."""
        prefixes, inner = [], len(core)
        for _ in range(levels):
            for number, head in reversed(wrapper):
                inner += len(head)
                p = varint(number << 3 | 2) + varint(inner) + head
                inner += len(p) - len(head)
                prefixes.append(p)
        return b"".join(reversed(prefixes)) + core

    float_vi = entry(2, entry(1, b"\x08\x01" + entry(2, entry(1, b"\x08\x01"))))  # float[1]

    def value(name: bytes) -> bytes:
        return entry(1, name) + float_vi

    def graph(body: bytes, inputs=(b"x",), outputs=(b"y",)) -> bytes:
        return (body + entry(2, b"g") + b"".join(entry(11, value(i)) for i in inputs)
                + b"".join(entry(12, value(o)) for o in outputs))

    def node(op: bytes, ins, outs, extra: bytes = b"") -> bytes:
        return entry(1, b"".join(entry(1, i) for i in ins) + b"".join(entry(2, o) for o in outs)
                     + entry(4, op) + extra)

    identity = node(b"Identity", [b"x"], [b"y"])
    # nesting past protobuf's limit of 100: 20,000 sequence types on an input (messages
    # the loader does not keep), 20,000 groups of an unknown field, 20,000 If subgraphs
    seq = nest(entry(1, b"\x08\x01"), 20000, [(4, b""), (1, b"")])
    out["deep-types"] = model(graph(identity, inputs=()) + entry(11, entry(1, b"x") + entry(2, seq)))
    out["deep-groups"] = model(graph(identity) + varint(99 << 3 | 3) * 20000
                               + varint(99 << 3 | 4) * 20000)
    leaf = graph(node(b"Identity", [b"x"], [b"y"]), inputs=())
    attr_head = entry(1, b"then_branch") + varint(20 << 3) + b"\x05"
    else_attr = entry(5, entry(1, b"else_branch") + varint(20 << 3) + b"\x05" + entry(6, leaf))
    if_head = entry(1, b"c") + entry(2, b"y") + entry(4, b"If") + else_attr
    cond = entry(11, entry(1, b"c") + entry(2, entry(1, b"\x08\x09" + entry(2, b""))))  # bool[]
    out["deep-ifs"] = model(nest(leaf, 20000, [(1, if_head), (5, attr_head), (6, b"")]))
    # and just under it: sequence types 40 deep, Ifs nested 30 deep (valid files)
    seq40 = nest(entry(1, b"\x08\x01"), 40, [(4, b""), (1, b"")])
    out["seq-types-40"] = model(graph(identity, inputs=()) + entry(11, entry(1, b"x") + entry(2, seq40)))
    ifs = leaf
    for _ in range(30):
        ifs = graph(entry(1, if_head + entry(5, attr_head + entry(6, ifs))), inputs=())
    out["nested-ifs-30"] = model(ifs[:-len(entry(12, value(b"y")))] + entry(11, value(b"x"))
                                 + cond + entry(12, value(b"y")))
    # repeated-field floods of millions of entries
    million = int(1_000_000 * scale)
    w = entry(5, entry(8, b"w") + b"\x10\x01" + entry(1, b"\x01" * 3 * million) + entry(9, b"\0" * 4))
    out["flood-dims"] = model(graph(node(b"Identity", [b"w"], [b"y"]) + w, inputs=()))
    out["flood-inputs"] = model(graph(node(b"Sum", [b"x"] * (3 * million), [b"y"])))
    out["flood-nodes"] = model(graph(identity * million))
    out["flood-outputs"] = model(graph(identity, outputs=[b"y"] * million))
    # dims far past any memory: 2^62 x 2^62 floats
    big = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "big",
                            [vi("x", F, [1 << 62, 1 << 62])], [vi("y", F, [1 << 62, 1 << 62])])
    out["huge-dims"] = helper.make_model(big, opset_imports=[helper.make_opsetid("", 17)]
                                         ).SerializeToString()
    return out


# ------------------------------------------------------------------ differential


def differential(args) -> int:
    import onnx
    from graphmem import wire
    rng = random.Random(args.seed)
    mutators = {name: Mutator(data) for name, data in seeds().items()}
    counts: Counter = Counter()
    differ = 0
    start = time.time()
    for i in range(args.count):
        seed_name = rng.choice(sorted(mutators))
        what, data = mutators[seed_name].mutant(rng)
        verdict = compare(data, onnx, wire)
        counts[verdict] += 1
        if verdict.startswith("DIFFER"):
            differ += 1
            print(f"mutant {i} of {seed_name} ({what}): {verdict}")
            if args.keep:
                _keep(Path(args.keep), data, "differential")
    print(f"{args.count} mutants in {time.time() - start:.1f} s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if args.write:
        lines = ["| protobuf and wire.parse_model | mutants |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in sorted(counts.items(), key=lambda x: -x[1])]
        if not differ:
            lines.append("| differ | 0 |")
        _write_campaign("differential", _command(), lines)
    return 1 if differ else 0


def compare(data: bytes, onnx, wire) -> str:
    """'both accept', 'both refuse', 'graph in pieces' (the documented exception), or
    'DIFFER: ...'."""
    try:
        onnx.ModelProto.FromString(data)
        pb = None
    except Exception as exc:
        pb = exc
    try:
        wire.parse_model(data)
        mine = None
    except ValueError as exc:
        mine = exc
    except Exception as exc:  # anything else is a bug
        return f"DIFFER: {type(exc).__name__}: {exc}"
    if pb is None and mine is None:
        return "both accept"
    if pb is not None and mine is not None:
        return "both refuse"
    if pb is None and "appears twice (a graph in pieces" in str(mine):
        return "graph in pieces"
    return f"DIFFER: protobuf {'accepts' if pb is None else 'refuses'}, wire says {mine}"


# ------------------------------------------------------------------ plan


WRAPPER = """import atexit, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
def peak():
    with open('/proc/self/status') as f:
        kb = next((l.split()[1] for l in f if l.startswith('VmHWM:')), '0')
    with open({peak_file!r}, 'w') as f:
        f.write(kb)
atexit.register(peak)
from graphmem.cli import main
sys.exit(main(sys.argv[1:]))
"""


@dataclass
class Outcome:
    kind: str  # plan, one-line, or a failure kind
    seconds: float
    peak_mb: float
    detail: str = ""


def run_plan(model: Path, extra: list[str], timeout: float = LIMIT_SECONDS,
             limit: int = LIMIT_BYTES) -> Outcome:
    """``graphmem plan MODEL`` in a subprocess under RLIMIT_AS and a time limit."""
    work = model.parent
    peak_file = str(work / (model.name + ".peak"))
    out = work / (model.name + ".plan.json")
    code = WRAPPER.format(limit=limit, peak_file=peak_file)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.time()
    proc = subprocess.Popen([sys.executable, "-c", code, "plan", str(model), "-o", str(out),
                             "-q", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", cwd=work, env=env,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        return Outcome("timeout", time.time() - start, 0.0, stderr[-300:])
    seconds = time.time() - start
    try:
        peak_mb = int(Path(peak_file).read_text() or 0) / 1024
    except (OSError, ValueError):
        peak_mb = 0.0
    lines = [line for line in stderr.splitlines() if line.strip()]
    if proc.returncode < 0:
        return Outcome(f"signal {signal.Signals(-proc.returncode).name}", seconds, peak_mb,
                       stderr[-300:])
    if "Traceback" in stderr:
        return Outcome("traceback", seconds, peak_mb, stderr[-400:])
    if "MemoryError" in stderr or "bad_alloc" in stderr:
        return Outcome("over 2 GB", seconds, peak_mb, stderr[-300:])
    if proc.returncode == 0:
        if lines and any(not line.startswith("graphmem: ") for line in lines):
            return Outcome("plan with other output", seconds, peak_mb, stderr[-300:])
        return Outcome("plan", seconds, peak_mb)
    if proc.returncode == 2:
        if len(lines) == 1 and lines[0].startswith("graphmem: "):
            return Outcome("one line, exit 2", seconds, peak_mb, lines[0])
        notes = [line for line in lines if line.startswith("graphmem: --dim-default")]
        if len(lines) == 2 and len(notes) == 1 and lines[1].startswith("graphmem: "):
            return Outcome("one line, exit 2", seconds, peak_mb, lines[1])
        return Outcome("several lines", seconds, peak_mb, stderr[-400:])
    return Outcome(f"exit {proc.returncode}", seconds, peak_mb, stderr[-300:])


FAILURES = ("traceback", "several lines", "timeout", "over 2 GB", "plan with other output")


def plan_campaign(args) -> int:
    rng = random.Random(args.seed)
    mutators = {name: Mutator(data) for name, data in seeds().items()}
    jobs = []
    if args.generated:
        jobs += [(name, "generated", data) for name, data in generated().items()]
    for i in range(args.count):
        seed_name = rng.choice(sorted(mutators))
        what, data = mutators[seed_name].mutant(rng)
        jobs.append((f"m{i}-{seed_name}", what, data))
    table: Counter = Counter()
    failures = []
    slowest, heaviest = 0.0, 0.0
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        def one(job):
            name, what, data = job
            folder = Path(tmp) / name
            folder.mkdir()
            model = folder / "m.onnx"
            model.write_bytes(data)
            extra = ["--dim-default", "2"] if rng.random() < 0.7 else []
            outcome = run_plan(model, extra)
            shutil.rmtree(folder, ignore_errors=True)
            return name, what, data, extra, outcome

        start = time.time()
        with ThreadPoolExecutor(args.jobs) as pool:
            for k, (name, what, data, extra, o) in enumerate(pool.map(one, jobs)):
                kind = o.kind
                if kind in ("plan", "one line, exit 2") and o.peak_mb > LIMIT_BYTES / 2**20:
                    kind = "over 2 GB"
                table[kind] += 1
                slowest = max(slowest, o.seconds)
                heaviest = max(heaviest, o.peak_mb)
                failed = kind not in ("plan", "one line, exit 2")
                if failed:
                    failures.append((name, what, kind, o.detail))
                    if args.keep:
                        _keep(Path(args.keep), data, kind.replace(" ", "-"))
                if args.verbose or failed:
                    print(f"{name} ({what}, {' '.join(extra)}): {kind} in {o.seconds:.1f} s, "
                          f"{o.peak_mb:.0f} MB {o.detail[-200:]!r}", flush=True)
                if (k + 1) % 200 == 0:
                    print(f"... {k + 1}/{len(jobs)} in {time.time() - start:.0f} s", flush=True)
    lines = ["| outcome | runs |", "|---|---|"]
    lines += [f"| {kind} | {n} |" for kind, n in sorted(table.items(), key=lambda x: -x[1])]
    for kind in ("traceback", "several lines", "signal", "timeout", "over 2 GB"):
        if not any(k.startswith(kind) for k in table):
            lines.append(f"| {kind} | 0 |")
    lines.append("")
    lines.append(f"{len(jobs)} runs ({args.count} mutants"
                 + (f", {len(jobs) - args.count} generated" if args.generated else "")
                 + f", seed {args.seed}); slowest {slowest:.1f} s, largest peak RSS "
                 f"{heaviest:.0f} MB (limits: {LIMIT_SECONDS} s, "
                 f"{LIMIT_BYTES >> 30} GB of address space).")
    for name, what, kind, detail in failures:
        lines.append(f"- {name} ({what}): {kind}: `{' '.join(detail.split())[-160:]}`")
    print("\n" + "\n".join(lines))
    if args.write:
        _write_campaign("plan", _command(), lines)
    return 1 if failures else 0


DOC = ROOT / "docs" / "hostile-input.md"


def _command() -> str:
    """The command line as the document shows it (without --keep's folder, which is
    this machine's)."""
    args, shown = sys.argv[1:], []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "--keep":
            skip = True
            continue
        if not a.startswith("--keep="):
            shown.append(a)
    return "python -m tools.faults.fuzz_reader " + " ".join(shown)


def _write_campaign(key: str, command: str, lines: list[str]) -> None:
    """Rewrite this tool's section ``key`` of docs/hostile-input.md."""
    import datetime
    import platform
    from tools.docs.sections import cpu_name, write_doc
    stamp = (f"Generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} "
             f"by `{command}` on {cpu_name()}, {os.cpu_count()} CPUs, Python "
             f"{platform.python_version()}.")
    write_doc(DOC, f"bench:fuzz-{key}", stamp + "\n\n" + "\n".join(lines))


def _keep(folder: Path, data: bytes, kind: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha1(data).hexdigest()[:12]
    (folder / f"{kind}-{digest}.onnx").write_bytes(data)


# ------------------------------------------------------------------ atheris


def atheris_main(argv: list[str]) -> int:
    try:
        import atheris
    except ImportError:
        print("fuzz_reader: atheris is not installed (pip install atheris)", file=sys.stderr)
        return 2
    with atheris.instrument_imports():
        from graphmem import wire
    import onnx

    # Coverage: atheris instruments Python code, not wire.c (that needs clang's
    # -fsanitize=fuzzer-no-link); this tool's own Python reading of the wire format is
    # instrumented instead, so libFuzzer keeps inputs of new structure (field kinds,
    # nesting, truncations) and mutates those.
    structure = atheris.instrument_func(parse)
    atheris.instrument_func(read_varint)

    def one(data: bytes) -> None:
        try:
            structure(data)
        except (ValueError, KeyError, RecursionError):
            pass
        verdict = compare(data, onnx, wire)
        if verdict.startswith("DIFFER"):
            raise AssertionError(verdict)

    # libFuzzer mutates the seed models (a corpus folder of them unless one is given)
    if not any(not a.startswith("-") for a in argv):
        corpus_dir = Path(tempfile.mkdtemp(prefix="fuzz-corpus-"))
        for name, data in seeds().items():
            if len(data) < 300_000:
                (corpus_dir / f"{name}.onnx").write_bytes(data)
        argv = [*argv, str(corpus_dir)]
    if not any(a.startswith("-max_len") for a in argv):
        argv = ["-max_len=300000", *argv]
    atheris.Setup([sys.argv[0], *argv], one)
    atheris.Fuzz()
    return 0


def corpus(args) -> int:
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in generated().items():
        (folder / f"{name}.onnx").write_bytes(data)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["atheris"]:
        return atheris_main(argv[1:])
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}",
                                 description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("differential", help="wire.parse_model against protobuf on mutants")
    d.add_argument("--count", type=int, default=2000)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--keep", help="write the mutants that differ here")
    d.add_argument("--write", action="store_true", help="rewrite docs/hostile-input.md's table")
    p = sub.add_parser("plan", help="graphmem plan on mutants, 2 GB and 20 s each")
    p.add_argument("--count", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--generated", action="store_true", help="the generated cases too")
    p.add_argument("--keep", help="write the failing mutants here")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--write", action="store_true", help="rewrite docs/hostile-input.md's table")
    c = sub.add_parser("corpus", help="write the generated cases to a folder")
    c.add_argument("folder")
    sub.add_parser("atheris", help="coverage-guided fuzzing of the reader (atheris)")
    args = ap.parse_args(argv)
    return {"differential": differential, "plan": plan_campaign, "corpus": corpus}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
