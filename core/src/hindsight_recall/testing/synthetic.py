"""A deterministic synthetic memory bank for scale benchmarks.

The text follows a Zipf vocabulary, names people and companies as entities, and is dated over three
years; memories carry tags, a few causal links and observations with sources. The vectors are
low-rank and clustered by topic, as real embeddings are: the statistics match all-MiniLM-L6-v2 on
LoCoMo (about 8 neighbours at cosine >= 0.7 per memory, median 1, nearest neighbour at 0.72). Pure
random vectors would be the worst case for HNSW and would give no semantic links at all.
"""

from __future__ import annotations

import calendar
import sys
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from ..types import Memory

DIMENSIONS = 384
START = datetime(2022, 1, 1, tzinfo=UTC)
DAYS = 3 * 365 + 1
VOCABULARY = 50_000
ZIPF_EXPONENT = 1.07
MEMORIES_PER_TOPIC = 40


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


#: the most frequent words, in rank order; generated pseudo-words follow them
COMMON_WORDS = _words(
    "the and to of a in that it was for on with he she they we is at as had but not this be have from "
    "by about after before then again some more very just really new old good great small big long "
    "meeting project dinner trip weekend plan call team work home family friend friends kids garden "
    "book music concert movie game school class office client report budget launch review design "
    "coffee lunch breakfast city park beach mountain river house car train flight hotel doctor "
    "hospital health run walk yoga painting photo photos birthday party wedding holiday vacation "
    "market price sale contract deadline release bug feature customer support training course recipe "
    "cake bread dog cat puppy bike hike camping festival museum gallery shop store"
)
FIRST_NAMES = _words(
    "Alice Bob Carol David Emma Felix Grace Hannah Ivan Julia Karl Laura Mateo Nina Oscar Paula "
    "Quentin Rosa Samir Tara Umar Vera Walter Xenia Yusuf Zoe Aiko Bruno Chloe Dmitri Elena Farid "
    "Greta Hugo Iris Jonas Kira Liam Maya Noah Olga Pedro Rina Sven Tomas Ulla Viktor Wanda Yara Zane "
    "Amara Boris Clara Dario Esme Finn Gemma Hector Ines"
)
LAST_NAMES = _words(
    "Smith Novak Garcia Müller Rossi Dubois Kowalski Tanaka Okafor Silva Jensen Moreau Fischer "
    "Ivanova Haddad Nguyen Schmidt Costa Larsen Kim Patel Cohen Weber Lopez Berg Santos Bauer Horvat "
    "Petrov Lindqvist Mensah Romano Varga Yilmaz Andersen Keller Marino Nakamura Quinn Reyes Sato "
    "Torres Vogel Walsh Young Zhang Adler Brandt Castillo Dahl Engel Ferreira Gallo Hahn Ito "
    "Jovanovic Klein Lund Meyer"
)
COMPANY_SUFFIXES = _words("Labs Robotics Systems Foods Capital Health Studios Logistics Energy Media")
TAGS = _words(
    "work family travel health finance hobby food friends learning home sports music reading shopping "
    "pets garden tech kids events volunteering"
)
VERBS = ("talked about", "mentioned", "planned", "finished", "started", "asked about", "worried about",
         "celebrated", "reviewed", "cancelled", "shared photos of", "recommended")

_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


@dataclass(frozen=True)
class VectorModel:
    """The low-rank topic model the memory and query vectors are drawn from.

    :param mean: the direction every vector shares (real embeddings have one, norm about 0.5).
    :param basis: the topic subspace, ``rank x dimensions``.
    :param centroids: one unit topic direction per topic, ``topics x rank``.
    :param tightness: how close a topic's members sit to its centroid.
    """

    mean: np.ndarray
    basis: np.ndarray
    centroids: np.ndarray
    tightness: np.ndarray
    mean_weight: float = 0.8
    noise: float = 1.1
    full_rank_noise: float = 0.4

    def draw(self, topics: np.ndarray, rng: np.random.Generator, noise_scale: float = 1.0) -> np.ndarray:
        """Unit float32 vectors for memories (or queries) of the given topics.

        :param topics: the topic of each vector.
        :param rng: the random generator to draw noise from.
        :param noise_scale: below 1 for queries, which sit nearer their topic than memories do.
        """
        rank, dims = self.basis.shape
        z = self.centroids[topics] * self.tightness[topics, None]
        z = z + rng.standard_normal((len(topics), rank), dtype=np.float32) * (
            self.noise * noise_scale / np.sqrt(rank))
        x = self.mean_weight * self.mean + z @ self.basis
        x += rng.standard_normal((len(topics), dims), dtype=np.float32) * (
            self.full_rank_noise * noise_scale / np.sqrt(dims))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out: np.ndarray = x.astype(np.float32, copy=False)
        return out


@dataclass(frozen=True)
class SyntheticBank:
    """Memories, their vectors and what queries need to know about them.

    :param memories: the memories, ids ``m0000000`` upwards.
    :param vectors: one unit vector per memory, ``n x dimensions`` float32.
    :param topics: the topic of each memory.
    :param topic_words: word indices each topic favours.
    :param words: the vocabulary, most frequent first.
    :param model: the vector model, to draw query vectors near a topic.
    :param seed: the seed it was generated from.
    """

    memories: list[Memory]
    vectors: np.ndarray
    topics: np.ndarray
    topic_words: np.ndarray
    words: np.ndarray
    model: VectorModel
    seed: int


@dataclass(frozen=True)
class BenchQuery:
    """One benchmark question with the vector a matching embedder would give it.

    :param kind: ``plain``, ``entity`` or ``temporal``.
    :param text: the question.
    :param vector: its synthetic query vector (used with synthetic memory vectors).
    :param window: the explicit temporal window of a temporal question.
    """

    kind: str
    text: str
    vector: np.ndarray
    window: tuple[datetime, datetime] | None = None


def vocabulary(size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` distinct lower-case words: common English first, then pronounceable pseudo-words.

    :param size: how many words.
    :param rng: the random generator.
    """
    words = list(dict.fromkeys(COMMON_WORDS))
    seen = set(words)
    while len(words) < size:
        n = int(rng.integers(2, 5))
        word = "".join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), n))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return np.array(words[:size], dtype=object)


def zipf_sampler(size: int, exponent: float) -> np.ndarray:
    """The cumulative Zipf distribution over ranks ``0..size-1``, for ``searchsorted`` sampling."""
    weights = 1.0 / np.arange(1, size + 1) ** exponent
    cdf: np.ndarray = np.cumsum(weights)
    cdf /= cdf[-1]
    return cdf


def _draw(cdf: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, rng.random(count)), len(cdf) - 1)


def _names(
    rng: np.random.Generator, people: int, companies: int, words: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    pairs = [f"{f} {last}" for last in LAST_NAMES for f in FIRST_NAMES]
    order = rng.permutation(len(pairs))
    persons = np.array([pairs[i] for i in order[:people]], dtype=object)
    # company names come from the rare end of the vocabulary, so they are distinctive keywords
    stems = words[len(words) // 2 :]
    picks = rng.choice(len(stems), companies, replace=False)
    firms = np.array([f"{str(stems[i]).capitalize()} {COMPANY_SUFFIXES[k % len(COMPANY_SUFFIXES)]}"
                      for k, i in enumerate(picks)], dtype=object)
    return persons, firms


def vector_model(
    topics: int, rng: np.random.Generator, dimensions: int = DIMENSIONS, rank: int = 48
) -> VectorModel:
    """A random topic model: a shared direction, a ``rank``-dimensional topic space, topic centroids.

    :param topics: how many topics.
    :param rng: the random generator.
    :param dimensions: the embedding dimension.
    :param rank: the dimension of the topic subspace.
    """
    basis = np.linalg.qr(rng.standard_normal((dimensions, rank)))[0].T.astype(np.float32)
    mean = rng.standard_normal(dimensions).astype(np.float32)
    mean /= np.linalg.norm(mean)
    centroids = rng.standard_normal((topics, rank)).astype(np.float32)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    tightness = rng.uniform(0.6, 1.6, topics).astype(np.float32)
    return VectorModel(mean, basis, centroids, tightness)


def generate(n: int, *, seed: int = 0, dimensions: int = DIMENSIONS, progress: bool = False) -> SyntheticBank:
    """Generate ``n`` memories and their vectors; the same ``(n, seed)`` always gives the same bank.

    :param n: how many memories.
    :param seed: the random seed.
    :param dimensions: the vector dimension (the embedding model's).
    :param progress: show a progress bar on stderr.
    """
    from tqdm import tqdm  # late: only long generations show progress

    rng = np.random.default_rng(seed)
    words = vocabulary(VOCABULARY, rng)
    cdf = zipf_sampler(len(words), ZIPF_EXPONENT)
    topic_count = max(8, n // MEMORIES_PER_TOPIC)
    model = vector_model(topic_count, rng, dimensions)
    # Topic words come from the middle and rare ranks: they are what makes a topic findable by keyword.
    topic_words = rng.integers(300, len(words), (topic_count, 40))
    popularity = 1.0 / np.arange(1, topic_count + 1) ** 0.5
    topics = rng.choice(topic_count, n, p=popularity / popularity.sum())
    people = min(len(FIRST_NAMES) * len(LAST_NAMES), max(50, n // 25))
    persons, firms = _names(rng, people, min(2000, max(20, n // 100)), words)
    person_cdf, firm_cdf = zipf_sampler(len(persons), 1.0), zipf_sampler(len(firms), 1.0)

    lengths = rng.integers(10, 41, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    general = _draw(cdf, int(offsets[-1]), rng)
    from_topic = rng.random(int(offsets[-1])) < 0.35
    topical = topic_words[np.repeat(topics, lengths), rng.integers(0, topic_words.shape[1], int(offsets[-1]))]
    word_ids = np.where(from_topic, topical, general)
    speaker, other = _draw(person_cdf, n, rng), _draw(person_cdf, n, rng)
    firm = _draw(firm_cdf, n, rng)
    has_firm, has_other, has_context = rng.random(n) < 0.6, rng.random(n) < 0.3, rng.random(n) < 0.15
    verbs = rng.integers(0, len(VERBS), n)
    type_draw = rng.random(n)
    seconds = rng.random(n) * DAYS * 86400
    date_kind = rng.random(n)
    span_days = rng.integers(1, 11, n)
    tag_count = rng.choice(3, n, p=(0.35, 0.45, 0.2))
    tag_ids = rng.integers(0, len(TAGS), (n, 2))
    causes = rng.random(n) < 0.01
    cause_step = rng.integers(1, 50, n)
    sources = rng.integers(0, np.maximum(np.arange(n), 1), (2, n))

    memories: list[Memory] = []
    bar = tqdm(range(n), desc="generating", unit="memory", disable=not progress, file=sys.stderr,
               mininterval=1.0)
    for i in bar:
        person = persons[speaker[i]]
        entities = [person]
        body = " ".join(words[word_ids[offsets[i] : offsets[i + 1]]])
        text = f"{person} {VERBS[verbs[i]]} {body}"
        if has_firm[i]:
            entities.append(firms[firm[i]])
            text += f" at {firms[firm[i]]}"
        if has_other[i] and persons[other[i]] != person:
            entities.append(persons[other[i]])
            text += f" with {persons[other[i]]}"
        fact_type = "world" if type_draw[i] < 0.6 else "experience" if type_draw[i] < 0.9 else "observation"
        when = START + timedelta(seconds=float(seconds[i]))
        start = end = mentioned = None
        if date_kind[i] < 0.9:
            start = end = when
        elif date_kind[i] < 0.95:
            start, end = when, when + timedelta(days=int(span_days[i]))
        else:
            mentioned = when
        memories.append(Memory(
            id=f"m{i:07d}", text=text + ".", type=fact_type, occurred_start=start, occurred_end=end,
            mentioned_at=mentioned,
            context=f"from a chat with {persons[other[i]]}" if has_context[i] else None,
            entities=tuple(dict.fromkeys(entities)),
            tags=tuple(dict.fromkeys(TAGS[t] for t in tag_ids[i, : tag_count[i]])),
            causes=(f"m{i + int(cause_step[i]):07d}",) if causes[i] and i + int(cause_step[i]) < n else (),
            source_ids=tuple(dict.fromkeys(f"m{int(s):07d}" for s in sources[:, i] if s != i))
            if fact_type == "observation" and i > 0 else (),
        ))
    vectors = np.empty((n, dimensions), dtype=np.float32)
    for block in range(0, n, 65_536):  # blocks keep the float temporaries small at 1M
        vectors[block : block + 65_536] = model.draw(topics[block : block + 65_536], rng)
    return SyntheticBank(memories, vectors, topics, topic_words, words, model, seed)


def queries(bank: SyntheticBank, count: int = 60, *, seed: int = 0) -> list[BenchQuery]:
    """A fixed question set: a third plain topic questions, a third about entities, a third temporal.

    :param bank: the bank the questions are about.
    :param count: how many questions.
    :param seed: the random seed.
    """
    rng = np.random.default_rng([bank.seed, seed, 7])
    n = len(bank.memories)
    out: list[BenchQuery] = []
    for k in range(count):
        i = int(rng.integers(0, n))
        memory, topic = bank.memories[i], int(bank.topics[i])
        picked = bank.words[bank.topic_words[topic, rng.choice(bank.topic_words.shape[1], 3, replace=False)]]
        vector = bank.model.draw(np.array([topic]), rng, noise_scale=0.6)[0]
        kind = ("plain", "entity", "temporal")[k % 3]
        window = None
        if kind == "plain":
            text = f"What happened with the {picked[0]} {picked[1]} and the {picked[2]}?"
        elif kind == "entity":
            text = f"What do I know about {' and '.join(memory.entities[:2])}?"
        else:
            year, month = divmod(int(rng.integers(0, 36)), 12)
            start = datetime(START.year + year, month + 1, 1, tzinfo=UTC)
            last = calendar.monthrange(start.year, start.month)[1]
            window = (start, start.replace(day=last, hour=23, minute=59, second=59))
            text = f"What happened in {start:%B %Y} about {picked[0]} {picked[1]}?"
        out.append(BenchQuery(kind, text, vector, window))
    return out


def split(bank: SyntheticBank, count: int) -> dict[str, tuple[list[Any], Any]]:
    """Contiguous slices of a generated bank; references across slices are dropped."""
    n = len(bank.memories)
    per = -(-n // count)
    out: dict[str, tuple[list[Any], Any]] = {}
    for k in range(count):
        part = bank.memories[k * per : (k + 1) * per]
        if not part:
            break
        inside = {m.id for m in part}
        kept = [replace(m, causes=tuple(c for c in m.causes if c in inside),
                        source_ids=tuple(s for s in m.source_ids if s in inside)) for m in part]
        out[f"bank-{k:05d}"] = (kept, bank.vectors[k * per : (k + 1) * per])
    return out
