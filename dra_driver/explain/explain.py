"""Explain a claim against one node: the scheduler's allocation walk, recording why each device is refused.

The walk follows kube-scheduler's structured allocator: requests in order, `firstAvailable` subrequests in
order, devices first-fit in slice order, backtracking when a later request cannot be met. A device is refused
for the first of: class selector, claim selector, taint, capacity policy, in use, capacity/shares left,
counters left, constraints. A selector error ends the walk, as it ends the scheduler's attempt on that node.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from dra_driver.core import families
from dra_driver.core.cluster_features import sharing_advice
from dra_driver.explain.capacity import consumed_capacity
from dra_driver.explain.catalog import Allocation, Catalog, CatalogDevice, DeviceKey, Taint, qualify
from dra_driver.explain.cel_env import (
    Outcome,
    Selector,
    SelectorCompileError,
    SelectorUnsupportedError,
    compile_selector,
    device_variable,
)
from dra_driver.explain.request import ALL, ClaimSpec, DeviceClassSpec, Request, Toleration
from dra_driver.explain.verdict import ClaimVerdict, DeviceVerdict, Reason, ReasonKind, RequestVerdict
from dra_driver.vocabulary.errors import InvalidNameError, TesseraError
from dra_driver.vocabulary.names import CORDON_TAINT_KEY, DRIVER_NAME
from dra_driver.vocabulary.quantity import format_quantity

MAX_STEPS = 200_000  # device checks before giving up, like the scheduler's allocation timeout


class _AbortError(TesseraError):
    """A selector errored at run time: the scheduler stops trying this node and reports the error."""


class _GiveUpError(TesseraError):
    pass


@dataclass(slots=True)
class _State:
    in_use: dict[DeviceKey, str] = field(default_factory=dict)  # exclusive device → holder
    shared: dict[DeviceKey, int] = field(default_factory=dict)  # multi-allocatable device → allocations
    used_capacity: dict[tuple[DeviceKey, str], Fraction] = field(default_factory=dict)
    used_counters: dict[tuple[str, str, str, str], Fraction] = field(default_factory=dict)
    picks: dict[str, tuple[CatalogDevice, ...]] = field(default_factory=dict)  # request → devices

    def copy(self) -> _State:
        return _State(
            dict(self.in_use),
            dict(self.shared),
            dict(self.used_capacity),
            dict(self.used_counters),
            dict(self.picks),
        )


@dataclass(frozen=True, slots=True)
class _Step:
    index: int  # request index
    alternative: int
    before: _State
    picked: tuple[CatalogDevice, ...]


class Explainer:
    def __init__(
        self,
        *,
        claim: ClaimSpec,
        classes: Mapping[str, DeviceClassSpec],
        catalog: Catalog,
        allocations: tuple[Allocation, ...],
        node: str,
    ) -> None:
        self._claim, self._classes, self._catalog, self._node = claim, classes, catalog, node
        self._errors: list[str] = []
        self._undecided: list[str] = []  # selectors the API server accepts but explain cannot evaluate
        self._unsupported: set[str] = set()
        self._compiled: dict[str, Selector | None] = {}
        self._evals: dict[tuple[str, DeviceKey], Outcome | str] = {}
        self._steps = 0
        self._initial = self._state_from(allocations)
        self._best: tuple[int, list[_Step], _State] | None = None

    # ---- public -------------------------------------------------------------------------------

    def explain(self) -> ClaimVerdict:
        self._compile_all()
        path: list[_Step] = []
        ok = False
        if not self._errors and not self._undecided:
            try:
                ok = self._search(0, self._initial, path)
            except _AbortError as e:
                self._errors.append(str(e))
            except _GiveUpError:
                self._errors.append(f"gave up after {MAX_STEPS} device checks without an allocation")
        requests = self._report(path if ok else None)
        return ClaimVerdict(
            self._claim.ref,
            self._node,
            ok and not self._errors,
            requests,
            tuple(self._errors),
            ()
            if self._errors
            else tuple(self._undecided),  # a rejected claim is decided: it is never created
        )

    # ---- set-up -------------------------------------------------------------------------------

    def _state_from(self, allocations: tuple[Allocation, ...]) -> _State:
        state = _State()
        for a in allocations:
            device = self._catalog.device(a.device)
            if device is None:
                continue
            if device.allow_multiple_allocations:
                if state.shared.get(device.key, 0) == 0:
                    self._take_counters(device, state)
                state.shared[device.key] = state.shared.get(device.key, 0) + 1
                for name, q in a.consumed.items():
                    k = (device.key, qualify(name, device.key.driver))
                    state.used_capacity[k] = state.used_capacity.get(k, Fraction(0)) + q.value
            else:
                state.in_use[device.key] = f"claim {a.claim}"
                self._take_counters(device, state)
        return state

    def _compile_all(self) -> None:
        for creq in self._claim.requests:
            for req in creq.alternatives:
                cls = self._classes.get(req.device_class)
                if cls is None:
                    self._errors.append(f"request {req.name}: DeviceClass {req.device_class} does not exist")
                    continue
                for i, expr in enumerate(cls.selectors):
                    self._compile(expr, f"DeviceClass {cls.name} selector #{i}")
                for i, expr in enumerate(req.selectors):
                    self._compile(expr, f"request {req.name} selector #{i}")

    def _compile(self, expression: str, where: str) -> None:
        if expression in self._compiled:
            return
        try:
            self._compiled[expression] = compile_selector(expression)
        except SelectorCompileError as e:
            self._compiled[expression] = None
            self._errors.append(f"{where}: CEL rejected by the API server: {e}")
        except SelectorUnsupportedError as e:
            self._compiled[expression] = None
            self._unsupported.add(expression)
            self._undecided.append(f"{where}: {e}")

    # ---- the walk -----------------------------------------------------------------------------

    def _search(self, index: int, state: _State, path: list[_Step]) -> bool:
        if index == len(self._claim.requests):
            return True
        creq = self._claim.requests[index]
        for alt, req in enumerate(creq.alternatives):
            for picked, after in self._choices(req, state):
                path.append(_Step(index, alt, state, picked))
                if self._search(index + 1, after, path):
                    return True
                path.pop()
        if self._best is None or index > self._best[0]:
            self._best = (index, list(path), state)
        return False

    def _choices(self, req: Request, state: _State) -> Iterator[tuple[tuple[CatalogDevice, ...], _State]]:
        if req.mode == ALL:
            matching = [d for d in self._catalog.devices if self._static_reason(req, d) is None]
            if not matching:
                return
            current = state
            for d in matching:
                if self._reason(req, d, current, ()) is not None:
                    return
                current = self._pick(req, d, current)
            yield tuple(matching), current
            return
        yield from self._combinations(req, state, 0, ())

    def _combinations(
        self, req: Request, state: _State, start: int, chosen: tuple[CatalogDevice, ...]
    ) -> Iterator[tuple[tuple[CatalogDevice, ...], _State]]:
        if len(chosen) == req.count:
            yield chosen, state
            return
        devices = self._catalog.devices
        for i in range(start, len(devices)):
            d = devices[i]
            if self._reason(req, d, state, chosen) is None:
                yield from self._combinations(req, self._pick(req, d, state), i + 1, (*chosen, d))

    def _pick(self, req: Request, d: CatalogDevice, state: _State) -> _State:
        after = state.copy()
        after.picks[req.name] = (*after.picks.get(req.name, ()), d)
        if d.allow_multiple_allocations:
            if after.shared.get(d.key, 0) == 0:
                self._take_counters(d, after)
            after.shared[d.key] = after.shared.get(d.key, 0) + 1
            consumed = consumed_capacity(req, d)
            for name, q in (consumed if isinstance(consumed, dict) else {}).items():
                k = (d.key, name)
                after.used_capacity[k] = after.used_capacity.get(k, Fraction(0)) + q
        else:
            after.in_use[d.key] = f"request {req.name} of this claim"
            self._take_counters(d, after)
        return after

    def _take_counters(self, d: CatalogDevice, state: _State) -> None:
        for counter_set, counters in d.consumes:
            for name, q in counters:
                k = (d.key.driver, d.key.pool, counter_set, name)
                state.used_counters[k] = state.used_counters.get(k, Fraction(0)) + q.value

    # ---- why a device is refused --------------------------------------------------------------

    def _selector(self, expression: str, d: CatalogDevice) -> Outcome | str:
        key = (expression, d.key)
        if key not in self._evals:
            compiled = self._compiled.get(expression)
            if compiled is None:
                self._evals[key] = Outcome.NO_MATCH
            else:
                result = compiled.evaluate(
                    device_variable(
                        driver=d.key.driver,
                        attributes=d.attributes,
                        capacity={k: c.value for k, c in d.capacity.items()},
                        allow_multiple_allocations=d.allow_multiple_allocations,
                    )
                )
                self._evals[key] = result.error if result.outcome is Outcome.ERROR else result.outcome
        return self._evals[key]

    def _static_reason(self, req: Request, d: CatalogDevice) -> Reason | None:
        cls = self._classes[req.device_class]
        for kind, owner, exprs in (
            (ReasonKind.CLASS_SELECTOR, f"DeviceClass {cls.name}", cls.selectors),
            (ReasonKind.CLAIM_SELECTOR, f"request {req.name}", req.selectors),
        ):
            for i, expr in enumerate(exprs):
                if expr in self._unsupported:
                    return Reason(
                        ReasonKind.SELECTOR_UNSUPPORTED,
                        f"{owner} selector #{i}: explain cannot evaluate {expr}",
                    )
                outcome = self._selector(expr, d)
                if outcome is Outcome.NO_MATCH:
                    return Reason(kind, f"{owner} selector #{i} is false: {expr}")
                if outcome is not Outcome.MATCH:
                    return Reason(
                        ReasonKind.SELECTOR_ERROR, f"{owner} selector #{i}: CEL runtime error: {outcome}"
                    )
        for t in d.taints:
            if t.effect in ("NoSchedule", "NoExecute") and not any(
                _tolerates(tol, t.key, t.value, t.effect) for tol in req.tolerations
            ):
                return Reason(ReasonKind.TAINTED, _taint_text(t, d))
        return None

    def _reason(
        self,
        req: Request,
        d: CatalogDevice,
        state: _State,
        chosen: tuple[CatalogDevice, ...],
        *,
        walking: bool = True,
    ) -> Reason | None:
        if walking:
            self._steps += 1
            if self._steps > MAX_STEPS:
                raise _GiveUpError("too many steps")
        static = self._static_reason(req, d)
        if static is not None:
            if walking and static.kind is ReasonKind.SELECTOR_ERROR:
                raise _AbortError(f"device {d.key.pool}/{d.name}: {static.message}")
            return static
        consumed = consumed_capacity(req, d)
        if isinstance(consumed, str):
            return Reason(ReasonKind.CAPACITY_POLICY, consumed)
        if d in chosen:
            return Reason(ReasonKind.ALREADY_ALLOCATED, f"already picked for request {req.name}")
        if not d.allow_multiple_allocations and d.key in state.in_use:
            return Reason(ReasonKind.ALREADY_ALLOCATED, f"in use by {state.in_use[d.key]}")
        if d.allow_multiple_allocations:
            for name, amount in consumed.items():
                used = state.used_capacity.get((d.key, name), Fraction(0))
                total = d.capacity[name].value.value
                if used + amount > total:
                    short = name.rpartition("/")[2]
                    kind = ReasonKind.SHARES_EXHAUSTED if short == "shares" else ReasonKind.CAPACITY_EXHAUSTED
                    return Reason(
                        kind, f"{short}: needs {_fmt(amount)}, {_fmt(total - used)} of {_fmt(total)} left"
                    )
        if not (d.allow_multiple_allocations and state.shared.get(d.key, 0) > 0):
            for counter_set, counters in d.consumes:
                limits = self._catalog.counter_sets.get((d.key.driver, d.key.pool, counter_set))
                for name, q in counters:
                    if limits is None or name not in limits:
                        return Reason(
                            ReasonKind.COUNTER_EXHAUSTED, f"counter {counter_set}/{name} is not published"
                        )
                    used = state.used_counters.get((d.key.driver, d.key.pool, counter_set, name), Fraction(0))
                    if used + q.value > limits[name].value:
                        left = limits[name].value - used
                        return Reason(
                            ReasonKind.COUNTER_EXHAUSTED,
                            f"counter {counter_set}/{name}: needs {_fmt(q.value)}, {_fmt(left)} left",
                        )
        return self._constraint_reason(req, d, state)

    def _constraint_reason(self, req: Request, d: CatalogDevice, state: _State) -> Reason | None:
        parent = req.name.partition("/")[0]
        for c in self._claim.constraints:
            if c.requests and parent not in c.requests and req.name not in c.requests:
                continue
            others = [
                o
                for r, devs in state.picks.items()
                for o in devs
                if not c.requests or r in c.requests or r.partition("/")[0] in c.requests
            ]
            attr = c.match_attribute or c.distinct_attribute
            if attr is None:
                continue
            mine = d.attributes.get(attr)
            if mine is None:
                return Reason(
                    ReasonKind.CONSTRAINT, f"has no attribute {attr} that the claim's constraint names"
                )
            common = _values(mine)  # a list matches where the lists of all picked devices share a value
            for o in others:
                theirs = o.attributes.get(attr)
                common &= _values(theirs)
                if c.match_attribute and (theirs != mine if _scalar(mine, theirs) else not common):
                    return Reason(
                        ReasonKind.CONSTRAINT,
                        f"matchAttribute {attr}: {_show(mine)} differs from {_show(theirs)} of {o.name}",
                    )
                clash = theirs == mine if _scalar(mine, theirs) else bool(_values(mine) & _values(theirs))
                if c.distinct_attribute and clash:
                    return Reason(
                        ReasonKind.CONSTRAINT,
                        f"distinctAttribute {attr}: {_show(mine)} already used by {o.name}",
                    )
        return None

    # ---- the report ---------------------------------------------------------------------------

    def _degraded_pool(self) -> str | None:
        """Why only whole GPUs are on offer when Tessera's pool on the node has no counter sets: the publisher
        fell back because the API server drops them (None: it has them, or Tessera has no pool here)."""
        ours = [d for d in self._catalog.devices if d.key.driver == DRIVER_NAME]
        if not ours or any(driver == DRIVER_NAME for driver, _, _ in self._catalog.counter_sets):
            return None
        return (
            f"this cluster does not serve shared counters: Tessera's pool {ours[0].key.pool} has whole GPUs "
            "only, because the API server drops sharedCounters (DRAPartitionableDevices off) and "
            f"multi-allocatable devices (DRAConsumableCapacity off); {sharing_advice()}"
        )

    def _report(self, path: list[_Step] | None) -> tuple[RequestVerdict, ...]:
        steps: list[_Step] = path if path is not None else (self._best[1] if self._best else [])
        failed_at = len(steps) if path is None else None
        failed_state = self._best[2] if (path is None and self._best) else self._initial
        out: list[RequestVerdict] = []
        for index, creq in enumerate(self._claim.requests):
            step = steps[index] if index < len(steps) else None
            for alt, req in enumerate(creq.alternatives):
                if req.device_class not in self._classes:
                    out.append(
                        RequestVerdict(
                            req.name, False, (), (), f"DeviceClass {req.device_class} does not exist"
                        )
                    )
                    continue
                if step is not None:
                    if alt > step.alternative:
                        continue
                    state, picked = step.before, (step.picked if alt == step.alternative else ())
                else:
                    state, picked = failed_state, ()
                reached = failed_at is None or index <= failed_at
                devices = tuple(
                    DeviceVerdict(f"{d.key.pool}/{d.name}", self._reason(req, d, state, (), walking=False))
                    for d in self._catalog.devices
                )
                fits = sum(1 for v in devices if v.reason is None)
                problem = ""
                if not picked and reached:
                    if self._undecided:
                        problem = "not evaluated: a selector of this claim uses CEL explain cannot evaluate"
                    elif req.mode == ALL:
                        problem = "allocationMode All: every matching device must be free"
                    elif fits >= req.count:
                        problem = (
                            f"{fits} devices fit alone, but no {req.count} of them together fit the counters,"
                            " constraints or the requests after this one"
                        )
                    else:
                        problem = f"needs {req.count} device(s), {fits} fit"
                        if fits == 0 and (degraded := self._degraded_pool()) is not None:
                            problem += f"; {degraded}"
                names = tuple(f"{d.key.pool}/{d.name}" for d in picked)
                out.append(RequestVerdict(req.name, bool(picked), names, devices, problem, reached))
        return tuple(out)


def _tolerates(tol: Toleration, key: str, value: str, effect: str) -> bool:
    if tol.effect and tol.effect != effect:
        return False
    if tol.operator == "Exists":
        return not tol.key or tol.key == key
    return tol.key == key and tol.value == value


def _fmt(v: Fraction) -> str:
    return format_quantity(v)


def explain_claim(
    *,
    claim: ClaimSpec,
    classes: Mapping[str, DeviceClassSpec],
    catalog: Catalog,
    allocations: tuple[Allocation, ...],
    node: str,
) -> ClaimVerdict:
    return Explainer(
        claim=claim, classes=classes, catalog=catalog, allocations=allocations, node=node
    ).explain()


def _scalar(*values: object) -> bool:
    return not any(isinstance(v, tuple) for v in values)


def _values(value: object) -> set[object]:
    """An attribute as the set of its values (a scalar is a set of one)."""
    return set(value) if isinstance(value, tuple) else {value}


def _show(value: object) -> str:
    return "[" + ", ".join(str(v) for v in value) + "]" if isinstance(value, tuple) else str(value)


def _taint_text(t: Taint, d: CatalogDevice) -> str:
    """Why a taint refuses the device; an administrator's cordon says who set it and how to lift it."""
    text = f"taint {t.key}={t.value}:{t.effect} is not tolerated"
    if t.key != CORDON_TAINT_KEY:
        return text
    try:
        gpu = f"gpu-{families.parse_device_name(d.name).index}"
    except InvalidNameError:
        gpu = "its GPU"
    return (
        f"{text}: an administrator {'drained' if t.effect == 'NoExecute' else 'cordoned'} {gpu} of this node "
        f"(`tessera gpu uncordon {d.key.pool} {gpu}` lifts it)"
    )
