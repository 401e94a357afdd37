"""How many cards stay free as the lifeboat (field_notes.toml "lifeboat": always keep one card
free for triage).  One rule for report, compare, place and doctor: the default is one card, and
a machine with a single card has none to spare, so there the default is none, said once in a
note, and everything else is judged as usual.  An explicit count that leaves no card to work on
is bad input."""

from __future__ import annotations

from nodeledger.errors import InputError

DEFAULT = 1


def one_card_note(cards: int) -> str:
    return (
        f"this machine has {cards} card: no lifeboat card can be kept free (a second card "
        "would be it), so every verdict here is judged without one"
    )


def resolve_lifeboat(cards: int, asked: int | None) -> tuple[int, str | None]:
    """(cards kept free, the note saying why it is not the one asked for, or None).  ``asked``
    None is the default: 1, or 0 on a one-card machine.  A count that is negative or leaves no
    card on a machine with cards raises :class:`InputError` (one line, exit 2)."""
    if asked is None:
        if cards == 1:
            return 0, one_card_note(cards)
        return (DEFAULT if cards else 0), None
    if asked < 0 or (cards and asked >= cards):
        raise InputError(
            f"--lifeboat {asked}: must be >= 0 and leave at least one of the machine's "
            f"{cards} card{'s' if cards != 1 else ''}"
        )
    return asked, None
