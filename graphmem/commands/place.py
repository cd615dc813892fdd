"""``graphmem place RECORDS``: offsets for a compiler's buffers, from MiniMalloc's CSV.

RECORDS is a CSV with a header naming ``id``, ``lower``, ``upper`` and ``size``
(MiniMalloc's ``buffer``, ``begin`` and ``end`` are read as ``id``, ``lower``, ``upper``;
an ``offset`` column is read too): a buffer of ``size`` bytes live over the half-open
interval ``[lower, upper)``. Or a ``.json`` file: ``{"buffers": [{"id": ..., "lower": ...,
"upper": ..., "size": ..., "offset": ...}, ...]}`` (a bare list also).

The placement is written in the same form with an ``offset`` column (``-o OUT.csv`` or
``OUT.json``, else CSV to stdout); one summary line goes to stderr. ``--capacity``: fit
in that many bytes or say it cannot: exit 1 when proven (by the max-live floor or the
complete search), 3 when not decided within the search's node budget (as ``plan
--capacity``: graphmem/commands/capacity_args.py).
``--check``: validate the offsets RECORDS already holds (exit 1 when wrong).
"""
from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

from graphmem.errors import GraphmemError

ALIASES = {"buffer": "id", "begin": "lower", "end": "upper"}
COLUMNS = ("id", "lower", "upper", "size")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "place", help="place a compiler's buffers in one arena (MiniMalloc's CSV form)",
        description="Offsets for buffers given as id,lower,upper,size (lifespans half-open), "
                    "in the smallest arena found, or within --capacity.")
    p.add_argument("records", metavar="RECORDS", help="a CSV (id,lower,upper,size) or .json file")
    p.add_argument("--capacity", metavar="N",
                   help="the arena's bytes (e.g. 1048576 or 1MiB): fit in it or say it cannot")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="write the placement here (.json for JSON, else CSV); default stdout")
    p.add_argument("--check", action="store_true",
                   help="validate the offsets RECORDS holds instead of placing")
    p.add_argument("--alignment", type=int, default=1, metavar="N",
                   help="every offset a multiple of N (default 1)")
    p.add_argument("--nodes", type=int, default=None, metavar="N",
                   help="how many steps the search may take before it stops with the best "
                        "placement found (default 600,000; past 1,000 buffers, per time "
                        "partition, and 4 times that over all partitions)")
    p.set_defaults(func=run)


def read_records(path: str) -> tuple[list[dict], bool]:
    """The rows of a records file (ints for lower, upper, size, offset; ids as given)
    and whether every row has an offset."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise GraphmemError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise GraphmemError(f"{path}: not a text file") from None
    if path.lower().endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise GraphmemError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
        rows = data.get("buffers") if isinstance(data, dict) else data
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise GraphmemError(f'{path}: expected {{"buffers": [{{"id", "lower", "upper", '
                                f'"size"}}, ...]}}')
        where = [f"{path}: buffer {k}" for k in range(len(rows))]
    else:
        reader = csv.reader(io.StringIO(text))
        header = next(reader, None)
        if header is None:
            raise GraphmemError(f"{path}: empty; expected a header id,lower,upper,size")
        names = [ALIASES.get(h.strip().lower(), h.strip().lower()) for h in header]
        missing = [c for c in COLUMNS if c not in names]
        if missing:
            raise GraphmemError(f"{path}: the header has no {', '.join(missing)} column "
                                f"(expected id,lower,upper,size)")
        rows, where = [], []
        for line, fields in enumerate(reader, start=2):
            if not fields or all(not f.strip() for f in fields):
                continue
            if len(fields) != len(names):
                raise GraphmemError(f"{path}:{line}: {len(fields)} fields, the header has "
                                    f"{len(names)}")
            rows.append(dict(zip(names, (f.strip() for f in fields))))
            where.append(f"{path}:{line}")
    out, seen = [], set()
    with_offsets = bool(rows)
    for row, at in zip(rows, where):
        rec = {"id": row.get("id")}
        if rec["id"] is None or rec["id"] == "":
            raise GraphmemError(f"{at}: no id")
        if str(rec["id"]) in seen:
            raise GraphmemError(f"{at}: id {rec['id']} appears twice")
        seen.add(str(rec["id"]))
        for col in ("lower", "upper", "size", "offset"):
            value = row.get(col)
            if value is None or value == "":
                if col == "offset":
                    with_offsets = False
                    continue
                raise GraphmemError(f"{at}: no {col}")
            rec[col] = _integer(value, f"{at}: {col}")
        if rec["upper"] <= rec["lower"]:
            raise GraphmemError(f"{at}: upper {rec['upper']} is not after lower {rec['lower']} "
                                "(lifespans are half-open)")
        if rec["size"] < 0:
            raise GraphmemError(f"{at}: size {rec['size']} is negative")
        out.append(rec)
    return out, with_offsets


# every value must stay well inside 64-bit arithmetic (sizes add up)
LIMIT = 2 ** 52


def _integer(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise GraphmemError(f"{what}: {value!r} is not an integer")
    try:
        v = int(value)
    except ValueError:
        raise GraphmemError(f"{what}: {value!r} is not an integer") from None
    if abs(v) >= LIMIT:
        raise GraphmemError(f"{what}: {v} is past 2**52")
    return v


def placement_text(rows: list[dict], offsets, as_json: bool) -> str:
    """The rows with their offsets, as CSV (id,lower,upper,size,offset) or JSON."""
    if as_json:
        buffers = [{"id": r["id"], "lower": r["lower"], "upper": r["upper"], "size": r["size"],
                    "offset": int(o)} for r, o in zip(rows, offsets)]
        return json.dumps({"buffers": buffers}, indent=1) + "\n"
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow((*COLUMNS, "offset"))
    for r, o in zip(rows, offsets):
        w.writerow((r["id"], r["lower"], r["upper"], r["size"], int(o)))
    return out.getvalue()


def run(args) -> int:
    from graphmem.commands.sizes import parse_bytes
    from graphmem.passes.placement import capacity as search
    from graphmem.passes.placement.buffers import (DEFAULT_NODES, check_placement,
                                                   place_buffers)
    from graphmem.plan.io import check_output, write_atomic

    cap = None if args.capacity is None else parse_bytes(args.capacity, "--capacity")
    if args.alignment < 1:
        raise GraphmemError(f"--alignment must be at least 1, not {args.alignment}")
    if args.nodes is not None and args.nodes < 1:
        raise GraphmemError(f"--nodes must be at least 1, not {args.nodes}")
    if args.output:
        check_output(args.output, [Path(args.records)])
    rows, with_offsets = read_records(args.records)
    cols = {c: [r[c] for r in rows] for c in ("size", "lower", "upper")}
    if args.check:
        if not with_offsets:
            raise GraphmemError(f"{args.records}: --check needs an offset for every buffer")
        offsets = [r["offset"] for r in rows]
        wrong = check_placement(cols["size"], cols["lower"], cols["upper"], offsets, cap,
                                args.alignment)
        top = max((o + s for o, s in zip(offsets, cols["size"])), default=0)
        if wrong:
            ids = [r["id"] for r in rows]
            first = _name_buffers(wrong[0], ids)
            print(f"graphmem: {args.records}: invalid placement: {first}"
                  + (f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""),
                  file=sys.stderr)
            return 1
        print(f"valid: {len(rows):,} buffers, arena {top:,} bytes"
              + (f" within {cap:,}" if cap is not None else ""), file=sys.stderr)
        return 0
    got = place_buffers(cols["size"], cols["lower"], cols["upper"], cap, args.alignment,
                        DEFAULT_NODES if args.nodes is None else args.nodes)
    if got.status != search.FITS:
        why = ("proven" + (f": {got.floor:,} bytes are live at once"
                           if got.floor > cap else " by a complete search")
               if got.proven else f"undecided after {got.nodes:,} search steps")
        print(f"graphmem: {args.records}: does not fit in {cap:,} bytes ({why})"
              if got.proven else
              f"graphmem: {args.records}: no placement within {cap:,} bytes found ({why})",
              file=sys.stderr)
        return 1 if got.proven else 3
    text = placement_text(rows, got.offsets.tolist(), bool(args.output)
                          and args.output.lower().endswith(".json"))
    if args.output:
        write_atomic(args.output, text, inputs=[args.records])
    else:
        sys.stdout.write(text)
    from graphmem.commands.pass_words import size, strategy_words
    proof = ("proven optimal: no smaller arena exists" if got.proven else
             f"the smallest possible is at least {got.lower_bound:,} bytes") \
        if cap is None else f"within the capacity of {cap:,}"
    shown_size = f"{size(got.total)}; " if got.total >= 1024 else ""
    print(f"placed {len(rows):,} buffers: arena {got.total:,} bytes ({shown_size}"
          f"{proof}; at most {got.floor:,} bytes are live at once; found by "
          f"{strategy_words(got.method)}"
          + (f" after {got.nodes:,} search steps" if got.nodes else "") + ")",
          file=sys.stderr)
    return 0


def _name_buffers(line: str, ids: list) -> str:
    """A check's line with buffer indices replaced by the file's ids."""
    import re
    return re.sub(r"buffers? (\d+)(?: and (\d+))?",
                  lambda m: ("buffers " + f"{ids[int(m[1])]} and {ids[int(m[2])]}") if m[2]
                  else f"buffer {ids[int(m[1])]}", line)
