"""A silo's own ledger in a release across silos (`pate silos run`, docs/silos.md): each silo
counts, in the ledger of its own records, every share it sends, and refuses a round its budget
cannot pay for.

The coordinator charges the release it publishes to the ledger `[silos] ledger` names
(`pate.steps.label_silos`); nothing there protects a silo from a coordinator that runs the
round again, or that sees more than the sum. This ledger does, at the silo:

- **which ledger** (`silo_ledger`): the ledger of the silo's own records, by the identity every
  central command gives them (`pate.store.ledger.Ledger.for_config`: the multiset of the records,
  or the data set the ledger folder knows that holds most of them; a silo holding a slice of a
  split, the block of records it reads, `rows`), in the silo's own ledger folder (its config's
  ``[privacy] ledger``, else its host's ``$PATE_LEDGER_DIR``, else the default);
- **before the round** (`check_budget`, at SecAgg+'s first message, before any silo has sent an
  input): refused, one line, when one more share would take that ledger past its budget (the
  config's ``[privacy] total_budget`` or the ledger's recorded one): the silo answers with that
  line, the round stops before any input is sent (a plan needing every share), nothing is
  released or charged anywhere;
- **the share** (`charge_share`): charged right before the silo's input leaves its code for
  SecAgg+'s mod, which masks and sends it (the budget checked again under the ledger's lock). A
  share sent is released: a round that fails after it keeps the charge; a silo that never sent
  one (refused, failed, killed before) charges nothing.

**Formal guarantee** (`share_cost`). What depends on silo i's records in everything the other
parties see of one round is its input y_i = (H_i + Z_i) mod M: H_i counts silo i's records only,
Z_i is its own share, the difference of two NB(1/h, p) variables, independent of everything else;
its keys and Shamir shares are independent of the records, and the other silos' inputs and the
released labels are functions of y_i and of values independent of silo i's records. So whatever
the coordinator and the other silos do — run the round again, break SecAgg+'s masks (seeded with
32 bits in Flower 1.42, docs/silos.md), subtract their own shares from the total — what they learn
of silo i's records from one round is post-processing of y_i, at most ε + Δ₁ ln h DP under
replace-one (Δ₁ = 2k; `analysis.mechanisms.silos.guaranteed_eps` with one of the h shares
present; y_i mod M is post-processing of H_i + Z_i). That is what a share costs here, every
round; it is the central ε exactly when the plan needs one share (h = 1). Granted a secure sum
and h − 1 other silos that add their shares and do not collude, the round costs the silo's
records no more than the release's ε; the ledger does not grant it.
"""

from __future__ import annotations

from analysis.core.errors import PateError
from analysis.mechanisms import composition
from analysis.mechanisms import silos as silos_mod
from pate.config import Config
from pate.release import fine_grained_release as fine_release


def share_cost(noise, needed: int) -> composition.Cost:
    """The ledger's cost of one share of `noise` drawn for `needed` shares (module docstring):
    pure ε + Δ₁ ln h (`guaranteed_eps` with one share present), the release's own cost at h = 1."""
    if int(needed) == 1:
        return noise.cost()
    return composition.Cost("pure", {"eps0": silos_mod.guaranteed_eps(noise, 1, int(needed)), "count": 1})


def silo_ledger(config: Config, rows: range | None = None):
    """The ledger of a silo's own records (module docstring): its config's whole train split, or
    the block `rows` of it (a silo holding a slice of the split)."""
    from pate.store.ledger import Ledger

    return Ledger.for_config(config, rows=rows)


def _config_cost(config: Config) -> composition.Cost:
    return share_cost(fine_release.noise_of(config.fine_grained, config.privacy.delta), config.silos.shares_needed)


def check_budget(config: Config, silo: int, rows: range | None = None) -> None:
    """Refuses (one line) silo `silo`'s next share when it would take its records' ledger past
    its budget: before the round, from the silo's own config (the plan it will check the
    coordinator's against)."""
    check_cost(config, silo, _config_cost(config), "its share of this release across silos", rows)


def check_cost(config: Config, silo: int, cost: composition.Cost, what: str, rows: range | None = None) -> None:
    """Refuses (one line, ``silo i: <what> would take ...``) when `cost` would take the ledger of
    silo `silo`'s records past its budget (`[privacy] total_budget` or the ledger's own): what every
    command across silos checks before a silo's first input is sent."""
    p = config.privacy
    silo_ledger(config, rows).check_budget([cost], p.total_budget, p.delta, f"silo {silo}: {what}")


def charge_cost(config: Config, kind: str, cost: composition.Cost, splits, mechanism: dict, note: str,
                rows: range | None = None) -> dict:
    """Charges `cost` (a release of `kind`) to the ledger of a silo's records, `splits` holding
    them (a keyed digest goes into the entry), under the ledger's lock and budget; the entry."""
    p = config.privacy
    book = silo_ledger(config, rows)
    return book.charge(kind, cost, budget=p.total_budget, delta=p.delta, mechanism=mechanism,
                       data_digest=book.keyed_digest(splits.train_x.tobytes(), splits.train_y.tobytes()), note=note)


def charge_share(config: Config, plan, silo: int, splits, rows: range | None = None) -> dict:
    """Charges silo `silo`'s share of the release `plan` (`pate.release.silo_release.SiloPlan`,
    the silo's own) to the ledger of its records, right before the share leaves (module
    docstring); `splits` hold those records (a keyed digest of them goes into the entry).
    Returns the entry.

    Raises:
      PateError: over its budget, or the ledger cannot be written: the share is not sent.
    """
    cost = share_cost(plan.noise, plan.needed)
    if cost.to_json() != _config_cost(config).to_json():
        raise PateError(f"internal error: silo {silo}'s plan and config cost its share differently")
    eps = cost.params["eps0"]  # pure: the share's ε (module docstring)
    describe = (f"a share sent into a fine-grained release across {plan.silos} silos (this silo: {silo}; "
                f"{plan.needed} shares needed): eps {eps:.6g} for these records whoever sees the share alone "
                f"(the release's own eps {plan.noise.eps():.6g})")
    return charge_cost(config, "labels", cost, splits,
                       {"name": "fine-grained", "noise": plan.noise.kind, "eps": eps,
                        "release_eps": plan.noise.eps(), "votes_per_record": plan.noise.votes,
                        "silos": plan.silos, "needed": plan.needed, "silo": int(silo),
                        "plan": plan.digest(), "describe": describe},
                       "a silo's share of a release across silos (pate silos run)", rows)
