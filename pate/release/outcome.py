"""What a teachers' release is expected to buy, said before any training, vote or charge:
`analysis.planning.expected_outcome` on the config's public vote model (the target planner's:
`vote_model`), printed by `pate plan --config`, `pate label` and `pate run`,
and a refusal, in one line naming the override, when the labels are expected near chance.

A user who releases anyway (``[aggregation] allow_near_chance = true``, or `pate label
--allow-near-chance`) gets the same line printed, labels.npz records it in its ``meta``
(`NEAR_CHANCE_KEY`: a public line, no vote in it) and `pate analyze` carries it into
release.json's ``warnings``.
"""

from __future__ import annotations

from analysis.core.errors import PateError
from analysis.mechanisms.record import Mechanism
from analysis.planning.expected_outcome import ExpectedOutcome, expected_outcome
from analysis.planning.simulated_votes import VoteModel

NEAR_CHANCE_KEY = "near_chance"  # labels.npz meta: the public warning of a release made anyway
CONFIG_OVERRIDE = "set [aggregation] allow_near_chance = true (--set aggregation.allow_near_chance=true)"
FLAG_OVERRIDE = "give --allow-near-chance"
LABEL_OVERRIDE = "give --allow-near-chance (or set [aggregation] allow_near_chance = true in the config)"


def expect(record: Mechanism, queries: int, model: VoteModel, *, max_answers: int | None = None,
           allow: bool = False, override: str = CONFIG_OVERRIDE, echo=print) -> ExpectedOutcome:
    """The expected outcome of ``queries`` queries of ``record`` on ``model``'s simulated votes,
    printed; refused when near chance unless ``allow``.

    Raises:
      PateError: the labels are expected near chance (or no query answered) and not ``allow``:
        one line naming ``override``.
    """
    outcome = expected_outcome(record, queries, model, max_answers=max_answers)
    if outcome.near_chance and not allow:
        raise PateError(outcome.refusal(override))  # the one line: it holds the figures
    echo(outcome.render())
    if outcome.near_chance:
        echo(f"{outcome.verdict()}; allowed (allow_near_chance): released anyway, and release.json's warnings "
             "say so")
    return outcome


def vote_model(config, num_teachers: int, num_classes: int) -> VoteModel:
    """The public vote model of a config's ensemble (`analysis.planning.simulated_votes`):
    ``[privacy] target_accuracy``; what the target planner and the expected outcome both draw from."""
    return VoteModel(int(num_teachers), int(num_classes), accuracy=config.privacy.target_accuracy)


def of_config(config, record: Mechanism, num_teachers: int, num_classes: int, *, queries: int | None = None,
              max_answers: int | None = None, override: str = CONFIG_OVERRIDE, echo=print) -> ExpectedOutcome:
    """`expect` for a run config: its ``[aggregation]`` queries (or ``queries``, a plan's), the
    vote model of its ensemble (`vote_model`: ``[privacy] target_accuracy``),
    its override ``[aggregation] allow_near_chance`` (named as ``override`` says)."""
    return expect(record, config.aggregation.queries if queries is None else queries,
                  vote_model(config, num_teachers, num_classes), max_answers=max_answers,
                  allow=config.aggregation.allow_near_chance, override=override, echo=echo)


def public_classes(config) -> int:
    """The class count of a config's data set, from the public pool alone (`pate.data.load_public`:
    no private record is read): what a plan made before training knows."""
    from pate.data import load_public

    return int(load_public(config.data).num_classes)


def meta(outcome: ExpectedOutcome) -> dict:
    """What labels.npz's ``meta`` records of a release's expected outcome: the warning line when
    it was made although near chance, else nothing."""
    return {NEAR_CHANCE_KEY: outcome.warning()} if outcome.near_chance else {}


def warnings(labels: dict) -> tuple[str, ...]:
    """release.json's warning lines of a labels.npz (`meta`): the near-chance line, if any."""
    line = (labels.get("meta") or {}).get(NEAR_CHANCE_KEY)
    if line is None:
        return ()
    if not isinstance(line, str):
        raise PateError("labels.npz's meta.near_chance is not a line of text; the file is damaged")
    return (line,)
