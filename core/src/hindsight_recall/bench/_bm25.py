"""Plain Okapi BM25 over a split's memories: the baseline ``bench recall`` prints beside the engine."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

K1 = 1.2
B = 0.75
_WORD = re.compile(r"\w+")
_STOPWORD_LIST = """
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers herself it
its itself they them their theirs themselves what which who whom this that these those am is are was were be been
being have has had having do does did doing a an the and but if or because as until while of at by for with about
against between into through during before after above below to from up down in out on off over under again further
then once here there when where why how all any both each few more most other some such no nor not only own same so
than too very s t can will just don should now"""
#: the common English stopword list (NLTK's): without it "I", "did" and "the" decide the ranking
STOPWORDS = frozenset(_STOPWORD_LIST.split())


def words(text: str) -> list[str]:
    """Lower-cased word tokens without stopwords; no stemming, as a textbook BM25 has it."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


class Okapi:
    """BM25 (k1 1.2, b 0.75) over one bank's memories.

    :param memories: (id, text) pairs.
    """

    def __init__(self, memories: Iterable[tuple[str, str]]) -> None:
        self.ids: list[str] = []
        self.counts: list[Counter[str]] = []
        for memory_id, text in memories:
            self.ids.append(memory_id)
            self.counts.append(Counter(words(text)))
        self.lengths = [sum(c.values()) for c in self.counts]
        self.average = sum(self.lengths) / len(self.lengths) if self.lengths else 0.0
        frequency: Counter[str] = Counter()
        for counts in self.counts:
            frequency.update(counts.keys())
        n = len(self.ids)
        self.idf = {term: math.log(1 + (n - df + 0.5) / (df + 0.5)) for term, df in frequency.items()}

    def rank(self, question: str, limit: int = 50) -> list[str]:
        """The ids of the memories that share a word with ``question``, best first (ties in load order).

        :param question: the question text.
        :param limit: how many ids to return.
        """
        terms: Sequence[str] = list(dict.fromkeys(words(question)))
        scored = []
        for i, counts in enumerate(self.counts):
            score = 0.0
            for term in terms:
                tf = counts.get(term, 0)
                if tf:
                    norm = K1 * (1 - B + B * self.lengths[i] / self.average)
                    score += self.idf[term] * tf * (K1 + 1) / (tf + norm)
            if score > 0:
                scored.append((-score, i))
        scored.sort()
        return [self.ids[i] for _, i in scored[:limit]]
