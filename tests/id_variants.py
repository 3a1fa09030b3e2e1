"""Hypothesis strategies for ids that differ from a plain one only by what a person cannot see.

Each example is a plain id and a variant of it of one of two kinds:

- ``refused``: a whitespace, invisible, combining or look-alike character inserted or substituted. No store can
  tell such an id from the plain one reliably (FalkorDB's index ignores spaces at either end; a reader cannot
  see the rest), so every surface must refuse it and touch nothing.
- ``same``: a compatibility spelling (fullwidth or mathematical letters) that NFKC reads as the plain id: every
  surface must treat it as the plain id's conversation, not as another one.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

WHITESPACE = [" ", "\t", "\u00a0", "\u1680", "\u2000", "\u2007", "\u2028", "\u205f", "\u3000", "\n"]
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u034f", "\ufe0f", "\u17b4", "\u1160",
             "\u3164", "\uffa0", "\u2800", "\u180e", "\U000e0041", "\u202e"]
COMBINING = ["\u0323", "\u0301", "\u0308"]
# Latin letter -> a letter of another script drawn alike.
CONFUSABLE = {"a": "\u0430", "e": "\u0435", "o": "\u043e", "p": "\u0440", "c": "\u0441", "x": "\u0445",
              "y": "\u0443", "i": "\u0456", "k": "\u03ba", "t": "\u03c4"}
PLAIN_ALPHABET = "abcdefghikoptxy0123456789-"


@dataclass(frozen=True)
class IdPair:
    plain: str
    variant: str
    kind: str  # "refused" or "same"


def _fullwidth(char: str) -> str:
    return chr(ord(char) + 0xFEE0) if "!" <= char <= "~" else char


def _bold(char: str) -> str:
    if "a" <= char <= "z":
        return chr(0x1D41A + ord(char) - ord("a"))
    if "0" <= char <= "9":
        return chr(0x1D7CE + ord(char) - ord("0"))
    return char


@st.composite
def id_pairs(draw: st.DrawFn, prefix: str) -> IdPair:
    """A plain id starting with ``prefix`` (so that examples never share a conversation; of one length in a test, as
    hypothesis replays draws) and a variant of it."""
    plain = prefix + draw(st.text(PLAIN_ALPHABET, min_size=2, max_size=10))
    kind = draw(st.sampled_from(["refused", "refused", "refused", "same"]))
    if kind == "same":
        spell = draw(st.sampled_from([_fullwidth, _bold]))
        where = draw(st.sets(st.integers(0, len(plain) - 1), min_size=1))
        variant = "".join(spell(char) if index in where else char for index, char in enumerate(plain))
        return IdPair(plain, variant, kind)
    how = draw(st.sampled_from(["insert", "insert", "substitute"]))
    substitutable = [index for index, char in enumerate(plain) if char in CONFUSABLE]
    if how == "substitute" and substitutable:
        index = draw(st.sampled_from(substitutable))
        return IdPair(plain, plain[:index] + CONFUSABLE[plain[index]] + plain[index + 1:], kind)
    char = draw(st.sampled_from(WHITESPACE + INVISIBLE + COMBINING))
    position = draw(st.sampled_from([0, len(plain), draw(st.integers(1, len(plain) - 1))]))
    return IdPair(plain, plain[:position] + char + plain[position:], kind)
