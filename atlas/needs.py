"""What a catalogue entry's header can say it needs: ``Need``, and the needs several entries share.

An entry's needs are written in its own SQL file's header (``-- needs:`` and ``-- notes:`` lines, see
``atlas.catalogue``): a count over the store with the message to show when it is 0, or the name of one of
the ``SHARED`` needs below. ``atlas.prerequisites`` checks them before the entry answers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Need:
    sql: str  # a count over the store, with the entry's parameters bound; 0 = the need is not met
    message: str  # formatted with the entry's parameters
    fatal: bool = True  # False: a note on stderr, the answer is still given


# entries that find special tokens by tokens.role, absent (NULL) in runs ingested before it existed
ROLES_STORED = Need(
    "SELECT (count(*) = 0)::INTEGER FROM tokens WHERE run_id = $run AND special IS NOT NULL AND role IS NULL",
    "run {run} was ingested before special tokens had roles (tokens.role): remove it ('atlas rm {run}') and "
    "ingest it again",
)


def _lacking(roles: tuple[str, str]) -> Need:
    """A note for a run whose inputs hold no special token of the roles (its tokenizer adds none); the header
    that names it says, after ``else:``, what that leaves empty."""
    listed = ", ".join(f"'{r}'" for r in roles)
    return Need(
        f"SELECT count(*) FROM tokens WHERE run_id = $run AND role IN ({listed})",
        f"run {{run}}'s inputs hold no special token of role {roles[0]} or {roles[1]} (its tokenizer adds none, "
        "e.g. a decoder's)",
        fatal=False,
    )


# entries that read the parse (words.deprel; a corpus of repeated tokens or plain sentences without spaCy has none)
PARSED = Need(
    "SELECT count(*) FROM words WHERE run_id = $run AND deprel IS NOT NULL",
    "run {run} has no dependency relations: ingest a corpus that has them (CoNLL-U such as UD English EWT, or a "
    "text or GLUE corpus, which spaCy parses)",
)

# entries that read the [CLS] row: in a decoder the BOS row attends only to itself (causal attention), in every head
BOS_ROW = Need(
    "SELECT (NOT EXISTS (SELECT 1 FROM tokens WHERE run_id = $run AND role = 'bos'))::INTEGER",
    "run {run} is a decoder's: its BOS row attends only to itself, the same in every head, not what the head does",
    fatal=False,
)

# the needs several entries share, by the name a header gives them (``-- needs: roles stored``); whether one
# refuses the entry or is a note is the header's choice (``needs:`` or ``notes:``), and its ``else:`` text,
# when given, follows the message after ': '
SHARED: dict[str, Need] = {
    "roles stored": ROLES_STORED,
    "dependency relations": PARSED,
    "cls or bos token": _lacking(("cls", "bos")),
    "sep or eos token": _lacking(("sep", "eos")),
    "no bos row": BOS_ROW,
}
