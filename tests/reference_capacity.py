"""The specification of the complete placement search at a fixed capacity
(``graphmem/capsearch.c``, called by passes/placement/capacity.py): the same depth-first
search as plain Python. tests/test_place_capacity.py runs both on the same problems
and asserts the same answer, the same offsets and the same count of nodes.

The problem, as the wrapper prepares it: buffers 0..n-1 of positive ``size``, each
live over the time sections ``[slo[b], shi[b])`` (sections are the intervals between
consecutive lifespan ends, numbered 0..nsec-1); ``adj[b]``: the buffers live at a
time ``b`` is; ``sec[s]``: the buffers live in section ``s``; ``width[b]``: its
lifespan's length; ``heuristic``: the preordering, the tie-break of buffers at the same
offset, as letters (MiniMalloc's): W the width, A the area (size times width), T the
most bytes still to place in a section the buffer spans; each larger first, then the
lower index. Each partition is preordered when its search starts (T then counts
only the buffers left).

A solution puts every buffer at an offset, a multiple of ``align``, such that two
buffers live at one time share no byte and every buffer ends at or below
``capacity``. The search explores canonical solutions only: buffers are placed in
non-decreasing (offset, rank) order, each at its lowest offset (the aligned top of the
highest placed buffer it meets in time), the next one chosen among all that remain
(dynamic ordering). A branch is pruned when, in some section of its partition, the
floor (the top of what is placed there, or the lowest offset any buffer left there
can take, and at least the branch's offset) plus the bytes still to place there
exceeds the capacity; when a buffer would start at or above the lowest top any buffer
left could reach (dominance: that buffer would fit below); and after a buffer that
meets no buffer left fails (nothing it does changes the rest). Whenever no buffer left
spans the boundary between two sections, the two sides are solved apart.

Returns (status, nodes, offsets): status 1 when a solution was found (offsets: one per
buffer), 0 when there is none (proven: the search is complete), -1 when ``node_limit``
nodes were visited first (offsets then unspecified).

Do not optimise this file: it is the specification.
"""
from __future__ import annotations

FOUND, NOT_FOUND, ABORTED = 1, 0, -1


def solve(size, slo, shi, nsec, adj, sec, width, heuristic, capacity, align, node_limit):
    n = len(size)
    off = [-1] * n
    minoff = [0] * n
    sol = [0] * n
    floor = [0] * nsec
    total = [0] * nsec
    for b in range(n):
        for s in range(slo[b], shi[b]):
            total[s] += size[b]
    # cuts[s]: the buffers left that span the boundary between sections s and s + 1
    cuts = [0] * max(nsec - 1, 0)
    for b in range(n):
        for s in range(slo[b], shi[b] - 1):
            cuts[s] += 1
    nodes = [0]

    def align_up(v):
        return -(-v // align) * align

    def preorder(bufs):
        """The buffers in the heuristic's order (T from the bytes still to place)."""
        def key(b):
            keys = {"W": width[b], "A": size[b] * width[b],
                    "T": max(total[s] for s in range(slo[b], shi[b]))}
            return tuple(-keys[c] for c in heuristic) + (b,)
        return sorted(bufs, key=key)

    def search(bufs, plo, phi, min_off, min_rank):
        """bufs: the partition's buffers, preordered; a buffer's rank is its place there."""
        if nodes[0] >= node_limit:
            return ABORTED
        nodes[0] += 1
        order = sorted((minoff[b], r, b) for r, b in enumerate(bufs) if off[b] < 0)
        if not order:
            return FOUND
        min_height = min(m + size[b] for m, _, b in order)
        for m, r, b in order:
            if m < min_off or (m == min_off and r < min_rank):
                continue  # not canonical: explored in another order
            if m >= min_height:
                continue  # dominated: a buffer left would fit below this one
            off[b] = m
            hatless = True
            bumped = []
            affected = set()
            top = align_up(m + size[b])
            for o in adj[b]:
                if off[o] >= 0:
                    continue
                hatless = False
                if minoff[o] >= top:
                    continue
                bumped.append((o, minoff[o]))
                minoff[o] = top
                affected.update(range(slo[o], shi[o]))
            floors = []
            for s in range(slo[b], shi[b]):
                floors.append((s, floor[s]))
                floor[s] = m + size[b]
                total[s] -= size[b]
            for s in sorted(affected):
                left = [minoff[o] for o in sec[s] if off[o] < 0]
                if left and floor[s] < min(left):
                    floors.append((s, floor[s]))
                    floor[s] = min(left)
            status = NOT_FOUND
            if all(max(floor[s], m) + total[s] <= capacity for s in range(plo, phi)):
                status = split(bufs, plo, phi, m, r, b)
            for s, f in reversed(floors):
                floor[s] = f
            for s in range(slo[b], shi[b]):
                total[s] += size[b]
            for o, v in reversed(bumped):
                minoff[o] = v
            off[b] = -1
            if status != NOT_FOUND:
                return status
            if hatless:
                break
        return NOT_FOUND

    def split(bufs, plo, phi, m, r, b):
        """After placing b: search on, or solve apart the parts no buffer left spans."""
        sol[b] = off[b]
        cutpoints = [plo]
        for s in range(slo[b], shi[b] - 1):
            cuts[s] -= 1
            if cuts[s] == 0:
                cutpoints.append(s + 1)
        if len(cutpoints) == 1:
            status = search(bufs, plo, phi, m, r)
        else:
            status = parts(bufs, cutpoints + [phi])
        for s in range(slo[b], shi[b] - 1):
            cuts[s] += 1
        return status

    def parts(bufs, cutpoints):
        for lo, hi in zip(cutpoints, cutpoints[1:]):
            sub = [o for o in bufs if off[o] < 0 and slo[o] < hi and lo < shi[o]]
            if sub:
                status = search(preorder(sub), lo, hi, 0, -1)
                if status != FOUND:
                    return status
        return FOUND

    status = parts(list(range(n)), [0] + [s + 1 for s in range(nsec - 1) if cuts[s] == 0] + [nsec])
    return status, nodes[0], sol if status == FOUND else None
