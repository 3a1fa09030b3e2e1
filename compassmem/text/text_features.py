"""Cheap lexical features of turns and events: tokens, keyword stems, named entities, action phrases.

All rule-based and deterministic: they run on every turn of the stream, so they must cost little next to
the embedder, and the offline path must not need a model beyond the embedder.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import NamedTuple

import Stemmer
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from compassmem.core.contracts.search import SparseVector

_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*|\d+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# Possessive whitespace: the old form `\s+(?:of|...)?\s*` could split a whitespace run between its two
# quantifiers in every way before failing, quadratic in the run's length; the matches are the same.
_CAPITALISED = re.compile(r"\b([A-Z][a-zA-Z'\-]+(?:\s++(?:(?:of|the|de|van|von)\s*+)?[A-Z][a-zA-Z'\-]+)*)")
# Sentences longer than this (no sentence end in sight: a run-on turn, a paste, text without [.!?] such as
# Japanese) are cut into clauses of at most this many characters for the per-sentence rules (relation cues).
# Ordinary sentences are far shorter (the longest in LoCoMo has 177 characters) and stay whole.
MAX_SENTENCE_CHARS = 400
_CLAUSE_PUNCTUATION = re.compile(r"[,;:]")
_WHITESPACE = re.compile(r"\s+")
_NON_WHITESPACE = re.compile(r"\S")
_TOKEN = re.compile(r"\S+")
_ASCII_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s"})

# Conversational filler that is capitalised or frequent but names nothing.
_FILLER = frozenset(
    """hey hi hello yeah yes yep no nope oh wow thanks thank thx ok okay lol haha hmm um uh gonna wanna
    really totally awesome great cool nice good glad sure so just also definitely absolutely amazing""".split()
)
STOP_WORDS = frozenset(ENGLISH_STOP_WORDS) | _FILLER | {"i'm", "it's", "that's", "you're", "i've", "don't", "can't"}
_NOT_ENTITIES = frozenset(
    """I I'm I've I'll I'd Hey Hi Hello Yeah Yes Wow Oh Thanks Thank Ok Okay So But And Or The A An It It's That
    That's This These Those What When Where Why How Who Which My Your Our Their His Her We You They He She Just
    Also Sure Great Awesome Cool Nice Good Glad Haha Lol Sounds Definitely Absolutely Totally Really Well Anyway
    Congrats Congratulations Aw Aww Omg Btw Bye Goodbye Woohoo Yay Yup Yep Mon Tue Wed Thu Fri Sat Sun Monday
    Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June July August September
    October November December Let Let's Take Keep Have Had Do Did Is Was Are Were Be Been Not No Me Mine""".split()
)
_SUBJECTS = frozenset({"i", "we", "she", "he", "they"})
_CLAUSE_BREAK = re.compile(r"[,.;:!?()\"]")


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def count_tokens(text: str) -> int:
    """A model-free token estimate (words x 1.3, the usual English ratio for word-piece tokenizers)."""
    return max(1, round(len(words(text)) * 1.3))


def ascii_lower(text: str) -> str:
    """``text.lower()``, with the letters that IGNORECASE takes for ASCII ones folded too ("ſ" is an "s").

    For prefilters that scan a lowercased text instead of running a slower case-insensitive regex.
    """
    if not text.isascii() and ("\u0130" in text or "\u0131" in text or "\u017f" in text):
        text = text.translate(_ASCII_FOLD)  # lower() makes "İ" two characters, "i" and a combining dot
    return text.lower()  # the Kelvin sign becomes "k"


def sentences(text: str, max_chars: int = MAX_SENTENCE_CHARS) -> list[str]:
    """Sentences (split after [.!?] + whitespace), each at most ``max_chars`` long.

    A longer sentence is cut into clauses: after the last comma, semicolon or colon in the second half of
    the allowed length, else at the last whitespace there, else hard at ``max_chars``. Linear in the text.
    """
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        if len(sentence) <= max_chars:
            pieces.append(sentence)
        else:
            pieces.extend(_clauses(sentence, max_chars))
    return pieces


def _clauses(sentence: str, max_chars: int) -> list[str]:
    pieces: list[str] = []
    start, size = 0, len(sentence)
    while size - start > max_chars:
        limit = start + max_chars
        half = start + max(1, max_chars // 2)
        cut = -1
        for match in _CLAUSE_PUNCTUATION.finditer(sentence, half, limit):
            cut = match.end()
        if cut < 0:
            for match in _WHITESPACE.finditer(sentence, half, limit + 1):
                cut = match.start()
        if cut < 0:
            cut = limit
        piece = sentence[start:cut].rstrip()
        if piece:
            pieces.append(piece)
        following = _NON_WHITESPACE.search(sentence, cut)
        start = following.start() if following else size
    if start < size:
        pieces.append(sentence[start:])
    return pieces


def keyword_stems(text: str) -> list[str]:
    """Content-word stems in order, repeats kept (term frequency matters for sparse vectors)."""
    return list(_keyword_stems(text))


# A turn's text is stemmed by segmentation, merging, frames, relations and both sparse vectors (about nine times
# per turn in a worker batch): the recent texts' stems are kept. Bounded: a text is at most 16 KiB, so at most
# 16 MiB of keys even for pathological input.
@lru_cache(maxsize=1024)
def _keyword_stems(text: str) -> tuple[str, ...]:
    content = [w.lower() for w in words(text) if len(w) > 2 and w.lower() not in STOP_WORDS and not w.isdigit()]
    return tuple(_stemmer().stemWords(content))


def stems(terms: Iterable[str]) -> list[str]:
    """The stems of lower-case words, as ``keyword_stems`` makes them ("memories" -> "memori")."""
    return _stemmer().stemWords(list(terms))


class Capitalised(NamedTuple):
    """A capitalised name of a text; ``opening``: a single word that only ever opens a sentence there, which its
    capital letter alone does not make a name ("Plus", "What's", "Caroline")."""

    name: str
    opening: bool


def capitalised_names(text: str) -> list[Capitalised]:
    """Capitalised names that are not sentence openers or filler: people, places, brands, titles; each once, in
    order."""
    found: dict[str, bool] = {}
    for sentence in _SENTENCE_END.split(text):
        for match in _CAPITALISED.finditer(sentence):
            parts = match.group(1).split()
            at_start = match.start() == 0
            skip = 0  # leading openers and filler ("So", "The"); an index, not pop(0), for a run of thousands
            while skip < len(parts) and parts[skip] in _NOT_ENTITIES:
                skip += 1
            if skip:
                parts = parts[skip:]
                at_start = False
            if not parts or (at_start and len(parts) == 1 and parts[0].lower() in STOP_WORDS):
                continue
            name = " ".join(parts)
            found[name] = found.get(name, True) and at_start and len(parts) == 1
    return [Capitalised(name, opening) for name, opening in found.items()]


def entities(text: str) -> list[str]:
    """The capitalised names of a text, sentence openers included: a question names who it asks about first
    ("Caroline went where?"). An event keeps an opener only where it is known as a name (``event_frames``)."""
    return [found.name for found in capitalised_names(text)]


def action_phrases(text: str, max_words: int = 7) -> list[str]:
    """'I went to a support group yesterday' -> 'went to a support group yesterday': what someone did or does."""
    phrases: list[str] = []
    for clause in _CLAUSE_BREAK.split(text):
        tokens = clause.split()
        for index, token in enumerate(tokens[:-1]):
            if token.lower() in _SUBJECTS:
                phrase = " ".join(tokens[index + 1 : index + 1 + max_words])
                if len(phrase.split()) >= 2:
                    phrases.append(phrase)
                break
    return phrases


def jaccard(left: Iterable[str], right: Iterable[str]) -> float:
    a, b = set(left), set(right)
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def weighted_overlap(left: Iterable[str], right: Iterable[str], weight: Callable[[str], float]) -> float:
    """The overlap coefficient with each term counted by its weight (e.g. IDF): sharing "awesome" and "thanks"
    says little, sharing "pottery" and "kiln" says the two texts are about the same thing."""
    a, b = set(left), set(right)
    if not a or not b:
        return 0.0
    smaller = min(sum(weight(t) for t in a), sum(weight(t) for t in b))
    return sum(weight(t) for t in a & b) / smaller if smaller > 0 else 0.0


def _term_index(term: str) -> int:
    # A stable 31-bit hash, so the same term gets the same sparse dimension in every process and store.
    return zlib.crc32(term.encode("utf-8")) & 0x7FFFFFFF


# The share by which a document's keyword weights may differ from the plain ones (``tie_break``).
TIE_BREAK_SHARE = 1e-3


def tie_break(key: str) -> float:
    """A factor in [1, 1 + TIE_BREAK_SHARE) fixed by ``key`` (a turn's or an event's id), for a document's keyword
    weights. Without it, every turn that names a query's words as often scores the same (the weights have no length
    term), and a keyword search cut such groups at its limit by the store's internal point order, which differs
    between two builds of the same memory: 727 of 997 development questions ranked differently. With it the order
    of equal matches is the same in every build, and matches whose scores differ by more than 0.1% keep theirs."""
    return 1.0 + TIE_BREAK_SHARE * (zlib.crc32(key.encode("utf-8")) / 2**32)


def sparse_keyword_vector(stems: Iterable[str], k1: float = 1.2, scale: float = 1.0) -> SparseVector:
    """BM25-style saturated term frequencies (times ``scale``); the store's IDF modifier supplies the inverse
    document frequency."""
    counts = Counter(stems)
    merged: dict[int, float] = {}
    for term, tf in counts.items():
        index = _term_index(term)
        merged[index] = merged.get(index, 0.0) + scale * tf * (k1 + 1) / (tf + k1)
    ordered = sorted(merged)
    return SparseVector(indices=ordered, values=[merged[i] for i in ordered])


def first_sentence(text: str, max_words: int = 20) -> str:
    """The first sentence's first ``max_words`` words (" ..." when it has more); reads no further than that."""
    tokens: list[str] = []
    for match in _TOKEN.finditer(text):
        token = match.group()
        tokens.append(token)
        # A token ending in [.!?] ends the sentence when more follows (a `_SENTENCE_END` split).
        if len(tokens) > max_words or token[-1] in ".!?":
            break
    return " ".join(tokens[:max_words]) + (" ..." if len(tokens) > max_words else "")


# --- conversational cues for topic segmentation ------------------------------------------------------------

# A sentence that opens with one of these changes the subject ("By the way, ...", "Any plans for ...?") or, in a
# support chat, starts a new request ("One more thing: ...", "I also need ..."). Matched at sentence starts only,
# after an optional interjection; every alternative is a fixed phrase, so a match costs at most a few dozen
# characters whatever the text.
_SHIFT_MARKER = re.compile(
    r"(?:(?:oh|ah|and|but|ok|okay|well|so|hey|alright|now|also)\b[\s,]{0,3}){0,2}"
    r"(?P<marker>by\s+the\s+way|btw|anyway|anyways|anyhow|speaking\s+of|on\s+(?:a|an|another)?\s?(?:other|different|"
    r"unrelated|separate|side|lighter|happier|brighter)\s+note|(?:to\s+)?chang(?:e|ing)\s+(?:the\s+)?(?:subject|topic)|"
    r"unrelated(?:ly)?,|random\s+question|quick\s+question|before\s+i\s+forget|one\s+(?:more|last|other)\s+thing|"
    r"another\s+thing|one\s+more\s+question|another\s+question|i\s+(?:also\s+)?have\s+(?:another|one\s+more)\s+"
    r"(?:question|request|issue|problem)|any\s+plans\s+for|what\s+are\s+your\s+plans\s+for|"
    r"(?:i|we)\s+also\s+(?:need|want|wanted|would\s+like|'d\s+like|have\s+(?:a|an)\s+(?:question|issue|problem))|"
    r"(?:can|could|would)\s+you\s+also|guess\s+what|did\s+i\s+(?:tell|mention)|i\s+forgot\s+to\s+(?:tell|ask))\b",
    re.IGNORECASE,
)
# A helper's offer to take the next request: what follows it (unless a closing) is a new request.
_OFFER = re.compile(
    r"\banything\s+else\s*+(?:\?|(?:that\s+)?(?:i|we)\s+(?:can|could|may)\b|you\s+(?:need|want)\b)|"
    r"\bhelp\s+(?:you\s+)?with\s+anything\s+else\b|\bwhat\s+else\s+can\s+(?:i|we)\s+(?:do|help)\b",
    re.IGNORECASE,
)
# A request's resolution, read at a turn's end: a farewell ("Have a great day!", "Goodbye") or the acknowledgement
# of thanks ("You're welcome"). What follows it, unless another closing, is a new request.
_RESOLUTION = re.compile(
    r"\b(?:have\s+an?\s+(?:(?:very|really|truly)\s+)?(?:good|great|nice|wonderful|lovely|pleasant|fantastic|safe|fun|"
    r"happy|awesome|terrific|excellent|blessed|beautiful|relaxing|productive|amazing|enjoyable)\s+(?:rest\s+of\s+"
    r"(?:the|your)\s+)?(?:day|one|evening|night|afternoon|morning|weekend|week|time|trip|flight|stay|meal)|"
    r"(?:^|[.!,;]\s*|\b(?:and|please|just)\s+)enjoy\s+(?:your|the)\s+(?:rest\s+of\s+(?:the|your)\s+)?[a-z]+|"
    r"good\s*-?bye|bye|take\s+care(?!\s+of)|"
    r"see\s+you(?:\s+(?:soon|later|around|next\s+time))?|until\s+next\s+time|pleasure\s+(?:is|was)\s+(?:all\s+)?mine|"
    r"you'?re\s+(?:very\s+|most\s+|so\s+)?welcome|glad\s+(?:i|we)\s+(?:could|was\s+able\s+to)\s+help|"
    r"(?:it\s+was\s+)?my\s+pleasure)\b[^?]{0,40}$",
    re.IGNORECASE,
)
# A short reply that ends a request instead of starting one ("No, thanks", "That will be all", "Not right now").
_CLOSING = re.compile(
    r"\W*+(?:(?:ok|okay|great|perfect|alright|awesome|cool|good|sounds\s+good|many|well)\b\W{0,3}){0,2}"
    r"(?:no|nope|nah|nothing|you\s+(?:too|as\s+well|do\s+the\s+same)|"
    r"not\s+(?:right\s+)?(?:now|today|at\s+(?:the|this)\s+(?:moment|time))|"
    r"that\s+(?:is|'s|s|will\s+be|would\s+be)\s+(?:all|it|everything)|thanks|thank\s+you|thx|all\s+good|"
    r"i'?m\s+(?:good|fine|all\s+set)|bye|goodbye)\b",
    re.IGNORECASE,
)
_GRATITUDE = re.compile(r"\b(?:thanks|thank\s+you|appreciate|that(?:'s|\s+is|\s+will\s+be|\s+would\s+be)\s+"
                        r"(?:all|it|everything)|done\s+for\s+now)\b", re.IGNORECASE)
_SHORT_WORDS = 14
_SHORT_CHARS = 200
# Marker matching looks at the first sentences only: a topic change is announced early in a turn.
_MARKER_SENTENCES = 4
_MARKER_PREFIX_CHARS = 80
_QUESTION_TAIL = " \t\r\n\"')]}>*_~.!"


def shift_marker(text: str) -> str | None:
    """The topic-shift or new-request phrase a sentence of the turn opens with, lower-cased; None when none does.

    "Poor folks. By the way, how is your puppy?" -> "by the way". Only the first few sentences are read.
    """
    for index, sentence in enumerate(_SENTENCE_END.split(text[: _MARKER_SENTENCES * MAX_SENTENCE_CHARS])):
        if index >= _MARKER_SENTENCES:
            break
        found = _SHIFT_MARKER.match(sentence.lstrip(" \t\r\n\"'(-*")[:_MARKER_PREFIX_CHARS])
        if found is not None:
            return " ".join(found.group("marker").lower().split())
    return None


def asks(text: str) -> bool:
    """The turn asks something (a question mark anywhere)."""
    return "?" in text


# A turn telling at least this many characters besides its questions is not "a turn that asks" (below).
TELLING_CHARS = 300


def question_share(text: str) -> float:
    """How much a turn only asks: the share of its characters in sentences that ask something ("That's lovely!
    What did you paint?": about two thirds), lowered as the rest of the turn tells more, to 0 at TELLING_CHARS.
    A question tells what its speaker wants to know, rarely what happened: its words match a question put to the
    memory better than the answer does. A request that first describes its asker's situation ("I set up Node 18
    on port 3000 and ... Can you review this?", the user's turns of an assistant chat) tells facts of its own."""
    if "?" not in text:  # most turns: no sentence to split
        return 0.0
    parts = [part for part in sentences(text) if part.strip()]
    total = sum(len(part) for part in parts)
    asking = sum(len(part) for part in parts if part.rstrip().endswith("?"))
    if not total:
        return 0.0
    return asking / total * max(0.0, 1.0 - (total - asking) / TELLING_CHARS)


# A standing instruction or preference: "Always use 24-hour times when I ask about meetings", "I prefer exact
# fractions over decimals", "from now on ...". It answers every later request on its subject, in whatever words
# that request is put.
_STANDING_WISH = re.compile(
    r"^\W*(?:please\s+)?(?:always|never)\b(?!\s+mind)"
    r"|\b(?:always|never)\b[^.?!\n]{0,160}?\bwhen(?:ever)?\s+I\s+(?:ask|request|need|send|share|mention)\b"
    r"|\bwhen(?:ever)?\s+I\s+ask\b|\bI(?:\s+would|'d|\s+really|\s+generally|\s+usually)?\s+prefer\b"
    r"|\bI(?:'d|\s+would)\s+rather\b|\b(?:my|a)\s+preference\s+(?:is|for)\b|\bfrom\s+now\s+on\b",
    re.IGNORECASE,
)


# What one of _STANDING_WISH's branches needs (in lower case, runs of white space as one space): a text without any
# is decided by substring tests, not by the pattern (tried at every position of a long answer, it cost a cold query
# a third of a millisecond per turn).
_WISH_WORDS = ("always", "never", "prefer", "rather", "from now on", "i ask")


def states_standing_wish(text: str) -> bool:
    """The turn states how its speaker wants things done from now on: an instruction or a preference."""
    plain = " ".join(text.lower().split())
    return any(word in plain for word in _WISH_WORDS) and _STANDING_WISH.search(text) is not None


def ends_with_question(text: str) -> bool:
    """The turn ends on a question, so the next speaker's turn is expected to answer it."""
    return text.rstrip(_QUESTION_TAIL).endswith("?") or text.rstrip().endswith("?")


def offers_more_help(text: str) -> bool:
    """"Is there anything else I can help you with?": the conversation's current request is done."""
    return _OFFER.search(text[-2 * MAX_SENTENCE_CHARS:]) is not None


def resolves_request(text: str) -> bool:
    """"Have a great day!", "You're welcome": the turn ends the request it closes."""
    return _RESOLUTION.search(text[-MAX_SENTENCE_CHARS // 2:].rstrip(_QUESTION_TAIL)) is not None


def closes(text: str) -> bool:
    """"No, thanks", "That will be all", "I appreciate your help.": a short reply that ends a request rather than
    making one (it opens with a closing, or thanks)."""
    if len(text) > _SHORT_CHARS or len(words(text)) > _SHORT_WORDS:
        return False
    return _CLOSING.match(text) is not None or _GRATITUDE.search(text) is not None


# A request of one's own, said early in a turn: "I'm trying to ...", "Can you help me find ...", "I need a taxi".
_REQUEST = re.compile(
    r"\b(?:(?:can|could|would|will)\s+you(?!\s+(?:believe|imagine|guess))|help\s+me|please\s+(?:find|book|get|"
    r"search|show|tell|check|reserve|make|add|set|help|play|buy|send|review|explain)|"
    r"i\s+(?:want|need|would\s+like|'d\s+like|wanted|wish)(?!\s+to\s+(?:tell|say|share|let\s+you))|"
    r"i'?m\s+(?:trying|looking|having\s+(?:some\s+)?(?:trouble|issues?|problems?)|planning|wondering|getting\s+an?\s+"
    r"error)|how\s+(?:do|can|should)\s+i|i\s+(?:have|had)\s+(?:a|an|another)\s+(?:question|issue|problem|trip))\b",
    re.IGNORECASE,
)
_REQUEST_PREFIX_CHARS = 240


def makes_request(text: str) -> bool:
    """The turn asks for something of its own early on ("Can you help me find a dentist?")."""
    return _REQUEST.search(text, 0, _REQUEST_PREFIX_CHARS) is not None


# A turn that opens with an anaphor points back at what was just said ("That's two more weeks of work"); one that
# opens with a reaction ("Wow", "Yes", "Cool") answers it, though it may go on to something else.
_REFERRING_OPENERS = frozenset(
    "that that's thats this it it's its they they're those these there there's same he she he's she's".split()
)
_REACTING_OPENERS = frozenset(
    """yes yeah yep yup no nope nah sure ok okay wow oh ah aw aww ha haha lol really exactly true right agreed
    definitely absolutely totally cool nice great awesome sounds congrats congratulations sorry thanks thank poor
    glad good""".split()
)
_FIRST_WORD = re.compile(r"[^\W\d_][\w']*")


# A turn that carries on from what was said: a follow-up, not a request of its own.
_CONTINUING = re.compile(r"\W*+(?:hmm+|hm+|so|but|and|then|in\s+that\s+case|what\s+if|what\s+about|how\s+about|"
                         r"ok(?:ay)?,?\s+so|wait)\b", re.IGNORECASE)


def continues(text: str) -> bool:
    """"hmm, what if ...", "So how do I ...", "But what about ...": the turn opens by carrying on."""
    return _CONTINUING.match(text) is not None


def opener(text: str) -> str | None:
    """'refers' when the turn opens with an anaphor, 'reacts' when it opens with a reaction, else None."""
    found = _FIRST_WORD.search(text, 0, 200)
    if found is None:
        return None
    word = found.group().lower().replace("\u2019", "'")
    if word in _REFERRING_OPENERS:
        return "refers"
    if word in _REACTING_OPENERS:
        return "reacts"
    return None


# Pronouns that point back at something already said: a question holding one asks about it ("Was it hard?",
# "Did you have to sand them first?") rather than opening something new ("Do you like country music?").
_ANAPHOR = re.compile(r"\b(?:it|its|it's|them|that|those|these|they|they're|there|he|she|him|her|his|one)\b",
                      re.IGNORECASE)
# How a question opens when it asks something of its own (a wh-word or an auxiliary); a short question that opens
# otherwise echoes what was just said ("A golden retriever?", "Tonight?", "Really?").
_QUESTION_OPENING = re.compile(
    r"\W*+(?:what|who|whom|whose|where|when|why|how|which|do|does|did|is|are|was|were|have|has|had|can|could|will|"
    r"would|should|shall|may|might|am|any|anything|ever)\b", re.IGNORECASE)
_YOU = re.compile(r"\byou\b", re.IGNORECASE)


class QuestionCues(NamedTuple):
    refers_back: bool  # a question holds a pronoun pointing back at what was said
    echoes: bool  # a short question (five words at most) without a wh-word or auxiliary of its own
    to_you: bool  # a question says "you": asked of the other person ("Do you like ...?")


def question_cues(text: str) -> QuestionCues:
    """What the turn's questions (its sentences ending in '?') point at; all False when it asks nothing."""
    questions = [s for s in sentences(text[: 4 * MAX_SENTENCE_CHARS]) if "?" in s]
    return QuestionCues(
        refers_back=any(_ANAPHOR.search(q) is not None for q in questions),
        echoes=any(len(q.split()) <= 5 and _QUESTION_OPENING.match(q) is None for q in questions),
        to_you=any(_YOU.search(q) is not None for q in questions),
    )
