"""Placing inline elements over a translation's words, from word links.

The elements of a text run form a tree (`parents[e]`: the element enclosing e, -1 for
none, always listed before e). Each source word belongs to its innermost element
(`word_owner[i]`, -1 for none). Given the links (i, j) between source word i and output
word j, `place` gives every element a span [start, end) of output words such that spans
nest as the elements do and siblings do not overlap (siblings may change order: a
translation reorders words), so the markup written around them is well formed and holds
the same tags in the same nesting.

1. Each output word belongs where its linked source words do (the innermost element
   among them); an unlinked word to the innermost element holding both its neighbours.
2. An element none of whose words kept an output word takes the output word aligned to
   its nearest source word that has links, unless that word is the last of another
   element (the issue's rule).
3. Top-down, the children of each element divide its span: a small dynamic programme
   over contiguous, ordered, non-overlapping spans keeps the most output words with the
   element they belong to, and gives each child at least as many words as it has leaf
   elements, so that every element ends up with at least one word whenever the
   translation has enough words for that at all. (A span with very many children and
   words is divided by a one-pass sweep instead, with the same guarantees but not the
   best score.)
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

Interval = tuple[int, int]
# children x words of one span above which `sweep` divides it instead of `divide` (the
# programme's steps grow as their product: a page-long paragraph of many tags)
DP_BUDGET = 100_000


def ancestry(parents: Sequence[int], element: int) -> list[int]:
    """The element and those enclosing it, innermost first."""
    chain = []
    while element >= 0:
        chain.append(element)
        element = parents[element]
    return chain


def depth(parents: Sequence[int], element: int) -> int:
    return len(ancestry(parents, element))


def common(parents: Sequence[int], a: int, b: int) -> int:
    """The innermost element enclosing both a and b (-1: none)."""
    enclosing_a = set(ancestry(parents, a))
    return next((e for e in ancestry(parents, b) if e in enclosing_a), -1)


def linked(links: Sequence[tuple[int, int]], n_src: int, n_out: int) -> list[list[int]]:
    """For each source word, its output words (links out of range are ignored)."""
    out: list[list[int]] = [[] for _ in range(n_src)]
    for i, j in links:
        if 0 <= i < n_src and 0 <= j < n_out:
            out[i].append(j)
    return [sorted(set(js)) for js in out]


def output_owners(parents: Sequence[int], word_owner: Sequence[int],
                  by_source: list[list[int]], n_out: int) -> list[int | None]:
    """Step 1 before the neighbours: each linked output word's element (None: unlinked)."""
    owners: list[int | None] = [None] * n_out
    for i, js in enumerate(by_source):
        for j in js:
            if owners[j] is None or depth(parents, word_owner[i]) > depth(parents, owners[j]):
                owners[j] = word_owner[i]
    return owners


def fill_unlinked(parents: Sequence[int], owners: list[int | None]) -> list[int]:
    """Step 1 for unlinked words: the innermost element holding both linked neighbours."""
    filled = list(owners)
    for j, owner in enumerate(owners):
        if owner is None:
            before = next((o for o in reversed(owners[:j]) if o is not None), -1)
            after = next((o for o in owners[j + 1:] if o is not None), -1)
            filled[j] = common(parents, before, after)
    return filled  # type: ignore[return-value]


def nearest_targets(by_source: list[list[int]], first: int, last: int) -> Iterator[int]:
    """Output words by how near their source word is to the words first..last: those of
    the words themselves, then of the nearest word on either side (left first), each
    side giving the output word nearest to where the element would sit."""
    for w in range(first, last + 1):
        yield from by_source[w][:1]
    for step in range(1, len(by_source)):
        for w in (first - step, last + step):
            if 0 <= w < len(by_source) and by_source[w]:
                yield by_source[w][-1] if w < first else by_source[w][0]


def give_lonely(parents: Sequence[int], ranges: Sequence[Interval],
                by_source: list[list[int]], owners: list[int]) -> None:
    """Step 2, in place: innermost elements first. held[e]: the output words e holds."""
    held = [0] * len(parents)
    for owner in owners:
        for e in ancestry(parents, owner):
            held[e] += 1
    for element in reversed(range(len(parents))):
        if held[element]:
            continue
        keep = set(ancestry(parents, element))
        for j in nearest_targets(by_source, *ranges[element]):
            # not the last word of an element that does not enclose this one
            losing = [e for e in ancestry(parents, owners[j]) if e not in keep]
            if all(held[e] > 1 for e in losing):
                for e in losing:
                    held[e] -= 1
                for e in keep - set(ancestry(parents, owners[j])):
                    held[e] += 1
                owners[j] = element
                break


def place(parents: Sequence[int], word_owner: Sequence[int], ranges: Sequence[Interval],
          links: Sequence[tuple[int, int]], n_out: int) -> list[Interval]:
    """Each element's span [start, end) over the output words; start == end for an
    element left without words (only when the translation has too few)."""
    by_source = linked(links, len(word_owner), n_out)
    owners = fill_unlinked(parents, output_owners(parents, word_owner, by_source, n_out))
    give_lonely(parents, ranges, by_source, owners)
    children: list[list[int]] = [[] for _ in range(len(parents) + 1)]  # [-1]: the run's
    for e, parent in enumerate(parents):
        children[parent].append(e)
    leaves = [0] * len(parents)
    for e in reversed(range(len(parents))):
        leaves[e] = max(1, sum(leaves[c] for c in children[e]))
    spans: list[Interval] = [(0, 0)] * len(parents)
    pending = [(-1, 0, n_out)]
    while pending:
        element, lo, hi = pending.pop()
        kids = children[element]
        if not kids:
            continue
        mine = [m_of(parents, owners[j], element, kids) for j in range(lo, hi)]
        share: list[list[int]] = [[] for _ in kids]  # each child's output words
        for j, m in enumerate(mine):
            if m >= 0:
                share[m].append(lo + j)
        needs = _needs([leaves[k] for k in kids], [len(s) for s in share], hi - lo)
        keys = [_key(s, ranges[k], len(word_owner), n_out) for s, k in zip(share, kids)]
        order = sorted(range(len(kids)), key=lambda m: (keys[m], m))
        if len(kids) * (hi - lo) <= DP_BUDGET:
            cuts = divide(mine_to_rank(mine, order), [needs[m] for m in order],
                          [keys[m] - lo for m in order], hi - lo)
        else:
            cuts = sweep([[j - lo for j in share[m]] for m in order],
                         [needs[m] for m in order], [keys[m] - lo for m in order], hi - lo)
        for rank, (start, end) in enumerate(cuts):
            kid = kids[order[rank]]
            spans[kid] = (lo + start, lo + end)
            pending.append((kid, lo + start, lo + end))
    return spans


def _needs(leaves: list[int], owned: list[int], room: int) -> list[int]:
    """Words each child must get: its leaf count, cut (children owning most words served
    first) when the span has fewer words than that."""
    if sum(leaves) <= room:
        return leaves
    needs = [0] * len(leaves)
    for m in sorted(range(len(leaves)), key=lambda m: (-owned[m], m)):
        needs[m] = min(leaves[m], room)
        room -= needs[m]
    return needs


def _key(share: list[int], source_range: Interval, n_src: int, n_out: int) -> float:
    """Where a child sits among its siblings: the middle of its output words, or where
    its source words sit proportionally when it has none."""
    if share:
        return (share[0] + share[-1]) / 2
    return (source_range[0] + source_range[1] + 1) / 2 * n_out / max(n_src, 1)


def m_of(parents: Sequence[int], owner: int, element: int, kids: list[int]) -> int:
    """Which child an output word belongs to (its index in kids), -1 for the element
    itself, -2 for neither (a word an enclosing element's division put here)."""
    if owner == element:
        return -1
    chain = ancestry(parents, owner)
    return next((m for m, kid in enumerate(kids) if kid in chain), -2)


def mine_to_rank(mine: list[int], order: list[int]) -> list[int]:
    rank = {m: r for r, m in enumerate(order)}
    return [rank.get(m, m) for m in mine]


def sweep(owned: list[list[int]], needs: list[int], keys: list[float], length: int
          ) -> list[Interval]:
    """Step 3 where the programme would be slow (DP_BUDGET): in one pass, each child (in
    key order) from its first output word to its last, or `need` words at its key when
    it has none, moved to follow the child before and to leave room for those after."""
    cuts: list[Interval] = []
    cursor, room_after = 0, sum(needs)
    for mine, need, key in zip(owned, needs, keys):
        room_after -= need
        wanted = (mine[0], mine[-1] + 1) if mine else (round(key), round(key) + need)
        start = min(max(wanted[0], cursor), length - room_after - need)
        end = min(max(wanted[1], start + need), length - room_after)
        cuts.append((start, end))
        cursor = end
    return cuts


def divide(mine: list[int], needs: list[int], keys: list[float], length: int
           ) -> list[Interval]:
    """The dynamic programme of step 3 over one span of `length` words. mine[p]: the child
    (by rank) word p belongs to, -1 the parent, -2 neither. Children take contiguous,
    ordered, non-overlapping intervals, child r at least needs[r] words. Score: a word in
    the interval of the child it belongs to, or outside every child when it belongs to
    the parent, counts `weight`; a word put in a child it does not belong to costs 1; a
    child with no word of its own costs the distance of its start from its key.

    Left to right over the words, in states "between children, r placed" (between[r])
    and "inside child r, c words in" (inside[r][c], c capped at the need): linear in the
    words times the states. Each state carries its history (a linked list of events)."""
    k, weight = len(needs), 4 * (length + 1)
    owns = [r in set(mine) for r in range(k)]
    full = [max(need, 1) for need in needs]
    # between[r] and inside[r][c] as parallel lists of scores and histories
    between, between_h = [0.0] + [-math.inf] * k, [None] * (k + 1)
    inside = [[-math.inf] * (f + 1) for f in full]
    inside_h: list[list[tuple | None]] = [[None] * (f + 1) for f in full]
    for p in range(length + 1):
        for r in range(k):  # the moves that take no word: end child r, or leave it empty
            if inside[r][full[r]] > between[r + 1]:
                between[r + 1] = inside[r][full[r]]
                between_h[r + 1] = (r, p, inside_h[r][full[r]])
            if needs[r] == 0 and between[r] - abs(p - keys[r]) > between[r + 1]:
                between[r + 1] = between[r] - abs(p - keys[r])
                between_h[r + 1] = (r, p, (r, p, between_h[r]))
        if p == length:
            break
        m = mine[p]
        for r in range(k):  # word p: going on in child r, or starting it
            gain = weight if m == r else (-1 if owns[r] else 0)
            _go_on(inside[r], inside_h[r], gain)
            start = between[r] + gain - (0 if owns[r] else abs(p - keys[r]))
            if start >= inside[r][1]:  # (a tie: the later start, the shorter interval)
                inside[r][1], inside_h[r][1] = start, (r, p, between_h[r])
        if m == -1:
            between = [score + weight for score in between]
    return _trace(between_h[k], k)


def _go_on(row: list[float], history: list, gain: float) -> None:
    """In place: one more word in a child, c words in -> c + 1 (capped at the last)."""
    last = len(row) - 1
    if last > 1 and row[last - 1] >= row[last]:
        row[last], history[last] = row[last - 1], history[last - 1]
    row[last] += gain
    for c in range(last - 1, 1, -1):
        row[c], history[c] = row[c - 1] + gain, history[c - 1]
    if last > 1:
        row[1], history[1] = -math.inf, None


def _trace(history: tuple | None, k: int) -> list[Interval]:
    """Each child's (start, end) from the events: the later of a child's two is its end."""
    ends: dict[int, int] = {}
    cuts: list[Interval] = [(0, 0)] * k
    while history is not None:
        child, position, history = history
        if child in ends:
            cuts[child] = (position, ends[child])
        else:
            ends[child] = position
    return cuts
