"""Packed Clef requests: typed questions about many subjects (paragraphs, chunks, passages) in
as few System One requests as the limits allow.

Why packing: a stage that asks two questions about each of 1,000 paragraphs would otherwise
send 1,000 requests, each repeating the instructions. Here one request carries up to 64
questions about many subjects, and each subject's text is sent once per request.

How a question names its subject. Upstream measured that referring to list items by position
(`items[4]`) answers about the wrong item far more often than the alternatives, so a subject
is never named by position:

- ``layout="state_key"`` (default): the state is an object whose keys are short subject ids
  (``s1``, ``s2`` ...) holding the texts, next to any shared ``context`` (e.g. the query); each
  question refers to its subject by key in backticks. A text is sent once however many
  questions are asked about it.
  With ``shared_wording=True`` a request about several subjects also sends each ask's wording
  once, in the state under the ask's name, and each question reads ``About `s3`: `is_relevant```:
  the wording is paid once per request instead of once per subject (a request about a single
  subject keeps the wording in the question, which is cheaper there).
- A subject may be sent in ``parts`` (its text cut where chunks will be cut): each part is a
  state key of its own and the question names them all, in order (``About `s3` `s4`: ...``).
  Within a request a text is sent once, under one key, whichever subjects it belongs to: a
  paragraph and the chunks cut from it (subjects of one ``bundle``, which are planned into the
  same request when they fit one) share their texts instead of sending them again.
- ``layout="inline"``: each question's instructions are a JSON object carrying the text itself
  (``{"passage": ..., "question": ...}``); the state holds only the context. Costs the text
  once per question; use it when a subject has a single question.

Answers are mapped back by question id (``<subject id>.<ask name>``), never by order, so a
server that answers in any order still lands each answer on its subject. Groups are planned
against the client's token budget and the 64-question limit before anything is sent; a
subject too large to fit any request fails alone with the reason. A group whose request still
fails after the client's retries reports each of its subjects in ``failed``: nothing is
skipped in silence.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from clef_pipelines.clef.client import ClefClient
from clef_pipelines.clef.errors import ClefError
from clef_pipelines.clef.tokens import (
    PROMPT_OVERHEAD_TOKENS,
    TokenCounter,
    question_tokens,
    state_tokens,
)
from clef_pipelines.clef.wire_common import MAX_QUESTIONS

if TYPE_CHECKING:
    from clef_pipelines.clef.wire import ChoiceAnswer, NoulAnswer, ScoreAnswer
    from clef_pipelines.clef.wire_light import PlainNoulAnswer

    # The models' answers, or `wire_light`'s plain ones (same attributes).
    Answer = NoulAnswer | ChoiceAnswer | ScoreAnswer | PlainNoulAnswer
Layout = Literal["state_key", "inline"]

#: Key of the subject texts' prefix in the state; short keys keep the prompt small.
_KEY_PREFIX = "s"


@dataclass(frozen=True)
class Ask:
    """A question asked about each subject. `instructions` speak of "the passage" (or
    paragraph, chunk ...); packing adds which subject that is."""

    name: str
    type: Literal["noul", "choice", "score"]
    instructions: str
    criteria: Mapping[str, Any] | Sequence[Any] | None = None

    def question(
        self, subject_ref: str | Sequence[str] | None, text: str | None, *, shared: bool = False
    ) -> dict[str, Any]:
        """The wire question about one subject: by state key (or the keys of its parts, in
        order), or with the text inline. `shared`: the wording is in the state under the ask's
        name; refer to it."""
        refs = [subject_ref] if isinstance(subject_ref, str) or subject_ref is None else subject_ref
        about = " ".join(f"`{r}`" for r in refs)
        if text is not None:
            instructions: Any = {"passage": text, "question": self.instructions}
        elif shared:
            instructions = f"About {about}: `{self.name}`"
        else:
            instructions = f"About {about}: {self.instructions}"
        q: dict[str, Any] = {"type": self.type, "instructions": instructions}
        if self.criteria is not None:
            q["criteria"] = (
                dict(self.criteria) if isinstance(self.criteria, Mapping) else list(self.criteria)
            )
        return q


@dataclass(frozen=True)
class Subject:
    """One thing questions are asked about. `key` is the caller's id (a chunk id, a block
    index ...) and is never sent; `asks` narrows which asks apply (None: all of them).

    `parts`: the text as sent, in pieces (each under its own state key, named in order by the
    question); None sends `text` whole. `text` stays what the subject is (the answer cache's
    key). `bundle`: subjects sharing a bundle (consecutive in the list) go in one request
    when they fit one, so the texts they share are sent once."""

    key: str
    text: str
    asks: tuple[str, ...] | None = None
    parts: tuple[str, ...] | None = None
    bundle: str | None = None

    def sent(self) -> tuple[str, ...]:
        """The texts sent for this subject (state layout)."""
        return self.parts if self.parts else (self.text,)


@dataclass
class PackedResult:
    """Answers per subject and ask; subjects whose request failed, with the reason."""

    answers: dict[str, dict[str, Answer]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    requests: int = 0
    input_tokens: int = 0

    def noul(self, key: str, ask: str) -> float | None:
        """P(true) of a noul ask about a subject, or None when it was not answered."""
        a = self.answers.get(key, {}).get(ask)
        return a.noul if a is not None and a.type == "noul" else None  # type: ignore[union-attr]


@dataclass
class _Group:
    #: (the state keys the subject is sent under, the subject, its asks)
    subjects: list[tuple[tuple[str, ...], Subject, list[Ask]]] = field(default_factory=list)
    #: state key -> text, each text once per request
    texts: dict[str, str] = field(default_factory=dict)
    questions: int = 0
    tokens: int = 0

    def shares_wording(self, shared_wording: bool, layout: Layout) -> bool:
        """Wording once in the state pays off only for a request about several subjects."""
        return shared_wording and layout == "state_key" and len(self.subjects) > 1


#: A plan: the requests' groups, and the subjects that fit no request (with the reason).
Plan = tuple[list[_Group], dict[str, str]]


def _asks_for(subject: Subject, asks: Sequence[Ask]) -> list[Ask]:
    if subject.asks is None:
        return list(asks)
    wanted = set(subject.asks)
    unknown = wanted - {a.name for a in asks}
    if unknown:
        raise ValueError(f"subject {subject.key!r} names unknown asks: {sorted(unknown)}")
    return [a for a in asks if a.name in wanted]


#: A subject as planned: the state keys it is sent under, the subject, its asks, and what its
#: questions cost.
_Member = tuple[tuple[str, ...], Subject, list[Ask], int]


def plan_groups(
    client: ClefClient,
    subjects: Sequence[Subject],
    asks: Sequence[Ask],
    *,
    context: Mapping[str, Any] | None = None,
    layout: Layout = "state_key",
    max_subjects_per_request: int | None = None,
    shared_wording: bool = False,
    first_ref: int = 1,
) -> tuple[list[_Group], dict[str, str]]:
    """Group subjects into requests that fit; subjects that fit nowhere are returned apart.
    `first_ref`: the number of the first subject's state key (`s<n>`); a later wave of one
    list of subjects goes on from where the earlier one stopped, so each subject is named
    (and costed) as it would be in one pass."""
    counter = client.backend.counter
    names = {a.name for a in asks}
    if len(names) != len(asks):
        raise ValueError("ask names must be unique")
    shared = shared_wording and layout == "state_key"
    fixed = dict(context or {})
    if shared:
        # Room for every ask's wording in the state; a request about one subject puts its
        # wording in the questions instead, which never costs more than this.
        fixed.update(_wording(asks))
    # A small margin: the client counts question headers by their place in the whole request.
    room = client.context_tokens - PROMPT_OVERHEAD_TOKENS - state_tokens(counter, fixed)
    planner = _Planner(
        counter,
        layout,
        budget=int(room * 0.97) - 8,
        first_ref=first_ref,
        shared=shared,
        max_subjects=max_subjects_per_request,
    )
    planned, too_large = planner.plan(subjects, asks)
    return planner.pack(_units(planned)), too_large


@dataclass
class _Planner:
    """Costs subjects and packs them into groups that fit one request each."""

    counter: TokenCounter
    layout: Layout
    budget: int
    first_ref: int
    shared: bool
    max_subjects: int | None
    # One state key per distinct text, numbered in order of first appearance: a text shared by
    # several subjects (a paragraph and the chunks cut from it) is sent once per request.
    refs: dict[str, str] = field(default_factory=dict)
    text_of: dict[str, str] = field(default_factory=dict)
    text_cost: dict[str, int] = field(default_factory=dict)

    def ref_of(self, text: str) -> str:
        ref = self.refs.get(text)
        if ref is None:
            ref = self.refs[text] = f"{_KEY_PREFIX}{len(self.refs) + self.first_ref}"
            self.text_of[ref] = text
            # The text's share of the state: its key and value inside the state object.
            self.text_cost[ref] = self.counter.count(f'"{ref}": ') + state_tokens(
                self.counter, text
            )
        return ref

    def plan(
        self, subjects: Sequence[Subject], asks: Sequence[Ask]
    ) -> tuple[list[_Member], dict[str, str]]:
        """Each subject with asks, costed; those too large for any request apart."""
        planned: list[_Member] = []
        too_large: dict[str, str] = {}
        seen: set[str] = set()
        for subject in subjects:
            if subject.key in seen:
                raise ValueError(f"subject keys must be unique; repeated: {subject.key!r}")
            seen.add(subject.key)
            mine = _asks_for(subject, asks)
            if not mine:
                continue
            member = self.member(subject, mine)
            alone = member[3] + (
                sum(self.text_cost[r] for r in set(member[0])) if self.layout == "state_key" else 0
            )
            if len(mine) > MAX_QUESTIONS or alone > self.budget:
                too_large[subject.key] = (
                    f"{len(mine)} questions and {alone} tokens do not fit one request "
                    f"(at most {MAX_QUESTIONS} questions and {self.budget} tokens beside the "
                    "context); texts are never truncated: split the subject"
                )
                continue
            planned.append(member)
        return planned, too_large

    def member(self, subject: Subject, mine: list[Ask]) -> _Member:
        if self.layout == "state_key":
            keys = tuple(self.ref_of(t) for t in subject.sent())
            inline = None
        else:
            keys = (self.ref_of(subject.text),)
            inline = subject.text
        cost = 0
        for i, a in enumerate(mine, start=1):
            cost += question_tokens(
                self.counter,
                f"{keys[0]}.{a.name}",
                a.question(keys, inline, shared=self.shared),
                i,
            )
        return keys, subject, mine, cost

    def new_texts(self, g: _Group, keys: Sequence[str]) -> set[str]:
        return {r for r in keys if r not in g.texts} if self.layout == "state_key" else set()

    def fits(self, g: _Group, members: Sequence[_Member]) -> bool:
        keys = {r for m in members for r in m[0]}
        tokens = g.tokens + sum(m[3] for m in members)
        tokens += sum(self.text_cost[r] for r in self.new_texts(g, list(keys)))
        questions = g.questions + sum(len(m[2]) for m in members)
        subjects = len(g.subjects) + len(members)
        return (
            questions <= MAX_QUESTIONS
            and tokens <= self.budget
            and (self.max_subjects is None or subjects <= self.max_subjects)
        )

    def add(self, g: _Group, member: _Member) -> None:
        keys, subject, mine, cost = member
        for r in self.new_texts(g, keys):
            g.texts[r] = self.text_of[r]
            g.tokens += self.text_cost[r]
        g.subjects.append((keys, subject, mine))
        g.questions += len(mine)
        g.tokens += cost

    def pack(self, units: list[list[_Member]]) -> list[_Group]:
        """Units in order, each into the last group when it fits, else into a new one."""
        groups: list[_Group] = [_Group()]
        for unit in units:
            g = groups[-1]
            if not self.fits(g, unit):
                if g.subjects:
                    g = _Group()
                    groups.append(g)
                if not self.fits(g, unit):
                    self.split(groups, unit)
                    continue
            for member in unit:
                self.add(g, member)
        return [g for g in groups if g.subjects]

    def split(self, groups: list[_Group], unit: list[_Member]) -> None:
        """A bundle too large for one request: its subjects go one by one (each sends its
        own texts), never dropped."""
        g = groups[-1]
        for member in unit:
            if not self.fits(g, [member]) and g.subjects:
                g = _Group()
                groups.append(g)
            self.add(g, member)


def _units(planned: list[_Member]) -> list[list[_Member]]:
    """Units placed whole: a bundle (consecutive subjects sharing one), or a subject alone."""
    units: list[list[_Member]] = []
    for member in planned:
        b = member[1].bundle
        if b is not None and units and units[-1][0][1].bundle == b:
            units[-1].append(member)
        else:
            units.append([member])
    return units


def _wording(asks: Sequence[Ask]) -> dict[str, str]:
    return {a.name: a.instructions for a in asks}


def _request(
    group: _Group, context: Mapping[str, Any] | None, layout: Layout, shared_wording: bool = False
) -> tuple[dict[str, Any], dict[str, Any], dict[str, tuple[str, str]]]:
    state: dict[str, Any] = dict(context or {})
    questions: dict[str, Any] = {}
    owners: dict[str, tuple[str, str]] = {}
    shared = group.shares_wording(shared_wording, layout)
    if shared:
        used: dict[str, Ask] = {a.name: a for _, _, mine in group.subjects for a in mine}
        state.update(_wording(list(used.values())))
    if layout == "state_key":
        state.update(group.texts)
    for keys, subject, mine in group.subjects:
        for a in mine:
            qid = f"{keys[0]}.{a.name}"
            n = 1
            while qid in questions:  # two subjects with the same text and ask: ids stay unique
                n += 1
                qid = f"{keys[0]}.{a.name}.{n}"
            text = subject.text if layout == "inline" else None
            questions[qid] = a.question(keys, text, shared=shared)
            owners[qid] = (subject.key, a.name)
    return state, questions, owners


async def ask_packed(
    client: ClefClient,
    subjects: Sequence[Subject],
    asks: Sequence[Ask],
    *,
    context: Mapping[str, Any] | None = None,
    layout: Layout = "state_key",
    max_subjects_per_request: int | None = None,
    use_cache: bool = True,
    shared_wording: bool = False,
    first_ref: int = 1,
    plan: Plan | None = None,
) -> PackedResult:
    """Ask every applicable ask about every subject, packed into as few requests as fit.

    `context` goes into every request's state (e.g. ``{"query": ...}``) and may be referred to
    from the ask instructions by key in backticks. Requests run concurrently; the client paces
    them, retries what is retryable and caches answers. `plan`: what `plan_groups` returned
    for these very arguments, when the caller has it already (it is not made again).
    """
    if layout not in ("state_key", "inline"):
        raise ValueError(f"layout must be 'state_key' or 'inline', not {layout!r}")
    if context and any(str(k).startswith(_KEY_PREFIX) and str(k)[1:].isdigit() for k in context):
        raise ValueError(f"context keys like '{_KEY_PREFIX}1' are reserved for subjects")
    if shared_wording and context and set(context) & {a.name for a in asks}:
        raise ValueError("with shared_wording, context keys must differ from the ask names")
    groups, too_large = plan or plan_groups(
        client,
        subjects,
        asks,
        context=context,
        layout=layout,
        max_subjects_per_request=max_subjects_per_request,
        shared_wording=shared_wording,
        first_ref=first_ref,
    )
    result = PackedResult(failed=dict(too_large))

    async def run(group: _Group) -> None:
        state, questions, owners = _request(group, context, layout, shared_wording)
        try:
            response = await client.ask(state, questions, use_cache=use_cache)
        except ClefError as exc:
            reason = f"{type(exc).__name__}: {exc}"
            for _, subject, _ in group.subjects:
                result.failed[subject.key] = reason
            return
        result.requests += 1
        result.input_tokens += response.usage.input_tokens
        for qid, answer in response.answers.items():
            owner = owners.get(qid)
            if owner is not None:
                result.answers.setdefault(owner[0], {})[owner[1]] = answer

    await asyncio.gather(*(run(g) for g in groups))
    return result
