"""The sans-IO wheel, driven directly: no asyncio, no clock."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from aiowheel._time._wheel import NEVER, UNQUEUED, Entry, Wheel


class Item(Entry):
    __slots__ = ("name",)

    def __init__(self, name: int) -> None:
        super().__init__()
        self.name = name

    def __repr__(self) -> str:
        return f"Item({self.name}, tick={self._tick})"


def test_entry_fires_at_its_tick_not_before() -> None:
    wheel = Wheel()
    item = Item(1)
    wheel.add(item, 100)
    assert len(wheel) == 1
    assert wheel.advance(99) == []
    assert item.pending()
    assert wheel.advance(100) == [item]
    assert not item.pending()
    assert len(wheel) == 0


@pytest.mark.parametrize("slots", [2, 4, 64, 256])
@pytest.mark.parametrize("delta", [0, 1, 63, 64, 65, 4095, 4096, 4097, 262143, 262144, 10**7])
def test_level_boundaries(slots: int, delta: int) -> None:
    wheel = Wheel(slots=slots, start=1000)
    item = Item(1)
    wheel.add(item, 1000 + delta)
    wheel.check()
    if delta:
        assert wheel.advance(1000 + delta - 1) == []
    assert wheel.advance(1000 + delta) == [item]
    wheel.check()
    assert wheel.next_expiration() is None


def test_stepping_one_tick_at_a_time_through_wrap_around() -> None:
    wheel = Wheel(slots=4)
    items = [Item(t) for t in range(300)]
    for t, item in enumerate(items):
        wheel.add(item, t)
    fired: list[int] = []
    for now in range(300):
        got = wheel.advance(now)
        assert [i.name for i in got] == [now]  # type: ignore[attr-defined]
        fired.extend(i.name for i in got)  # type: ignore[attr-defined]
        wheel.check()
    assert fired == list(range(300))


FAR = [2**36 - 1, 2**36, 2**40 + 12345, 2**62, 2**62 + 7, 2**64 + 3, 2**70 + 1]


@pytest.mark.parametrize("deadline", FAR)
def test_far_deadlines_fire_exactly_on_time(deadline: int) -> None:
    wheel = Wheel(slots=64, start=5)
    item = Item(1)
    wheel.add(item, deadline)
    wakes = 0
    now = 5
    # Jump from bucket expiration to bucket expiration as a driver would.
    while True:
        nxt = wheel.next_expiration()
        assert nxt is not None
        assert nxt <= deadline
        wakes += 1
        got = wheel.advance(nxt)
        now = nxt
        wheel.check()
        if got:
            assert got == [item]
            break
        assert wakes < 100
    assert now == deadline


def test_huge_jump_fires_everything_due_in_tick_order() -> None:
    wheel = Wheel(slots=8)
    ticks = [5, 3, 9000, 64, 1, 70000, 2**40]
    items = [Item(t) for t in ticks]
    for item, t in zip(items, ticks, strict=True):
        wheel.add(item, t)
    got = wheel.advance(100_000)
    assert [i.tick for i in got] == sorted(t for t in ticks if t <= 100_000)
    assert len(wheel) == 1


def test_never_is_pending_removable_and_never_due() -> None:
    wheel = Wheel()
    item = Item(1)
    assert wheel.add(item, NEVER) == UNQUEUED  # held apart: no bucket queued
    assert len(wheel) == 1
    assert wheel.next_expiration() is None
    assert wheel.advance(10**30) == []
    assert wheel.remove(item) is True
    assert len(wheel) == 0


def test_past_tick_is_due_at_next_advance() -> None:
    wheel = Wheel(start=500)
    item = Item(1)
    assert wheel.add(item, 3) == 500
    assert wheel.advance(500) == [item]


def test_remove_twice_or_after_firing_reports_false() -> None:
    wheel = Wheel()
    a, b = Item(1), Item(2)
    wheel.add(a, 10)
    wheel.add(b, 10)
    assert wheel.remove(a) is True
    assert wheel.remove(a) is False
    assert wheel.advance(10) == [b]
    assert wheel.remove(b) is False
    assert len(wheel) == 0
    wheel.check()


def test_move_later_touches_no_bucket_and_refiles_when_due() -> None:
    wheel = Wheel()
    item = Item(1)
    wheel.add(item, 10)
    heap_before = list(wheel._heap)
    assert wheel.move(item, 5000) == UNQUEUED
    assert wheel._heap == heap_before  # no heap work
    assert wheel.advance(10) == []  # re-filed, not fired
    assert item.pending()
    assert wheel.advance(4999) == []
    assert wheel.advance(5000) == [item]


def test_move_earlier_refiles() -> None:
    wheel = Wheel()
    item = Item(1)
    wheel.add(item, 5000)
    assert wheel.move(item, 10) == 10
    assert wheel.advance(10) == [item]
    wheel.check()


def test_emptied_and_refilled_bucket_leaves_no_duplicate_queue_items() -> None:
    wheel = Wheel()
    for _ in range(10_000):
        item = Item(1)
        wheel.add(item, 30_000)
        wheel.remove(item)
    assert len(wheel._heap) == 1
    assert wheel.live_queue_items() == 0
    assert wheel.next_expiration() is None
    assert wheel._heap == []


@pytest.mark.parametrize("slots", [0, 1, 3, 63, -64, 64.0, "64"])
def test_bad_slots_is_a_value_error_naming_slots(slots: object) -> None:
    with pytest.raises(ValueError, match="slots"):
        Wheel(slots=slots)  # type: ignore[arg-type]


@pytest.mark.parametrize("tick", [1.0, "1", None, True])
def test_non_int_tick_is_a_type_error_and_changes_nothing(tick: object) -> None:
    wheel = Wheel()
    item = Item(1)
    with pytest.raises(TypeError, match="tick"):
        wheel.add(item, tick)  # type: ignore[arg-type]
    assert len(wheel) == 0
    assert not item.pending()
    wheel.check()


def test_adding_a_pending_entry_again_is_refused() -> None:
    wheel = Wheel()
    item = Item(1)
    wheel.add(item, 5)
    with pytest.raises(ValueError, match="already pending"):
        wheel.add(item, 6)
    assert len(wheel) == 1
    wheel.check()


def test_time_cannot_go_backwards() -> None:
    wheel = Wheel()
    wheel.advance(10)
    with pytest.raises(ValueError, match="backwards"):
        wheel.advance(9)
    assert wheel.elapsed == 10


def test_drain_returns_everything() -> None:
    wheel = Wheel()
    items = [Item(i) for i in range(100)]
    for i, item in enumerate(items):
        wheel.add(item, i * 997 if i else NEVER)
    out = wheel.drain()
    assert sorted(id(i) for i in out) == sorted(id(i) for i in items)
    assert len(wheel) == 0
    assert wheel.next_expiration() is None
    wheel.check()


ticks = st.one_of(
    st.integers(0, 80),
    st.integers(0, 5000),
    st.integers(0, 2**20),
    st.integers(2**36 - 100, 2**36 + 100),
    st.integers(2**64 - 100, 2**64 + 100),
    st.just(2**62),
)


class WheelModel(RuleBasedStateMachine):
    """Random add / remove / move / advance against a dict-of-deadlines reference model."""

    entries = Bundle("entries")

    def __init__(self) -> None:
        super().__init__()
        self.slots = 4
        self.wheel = Wheel(slots=self.slots)
        self.now = 0
        self.model: dict[int, int] = {}  # name -> deadline tick, live entries only
        self.fired: set[int] = set()
        self.next_name = 0

    @rule(target=entries, offset=ticks)
    def add(self, offset: int) -> Item:
        item = Item(self.next_name)
        self.next_name += 1
        tick = self.now + offset - 3  # sometimes in the past
        self.wheel.add(item, tick)
        self.model[item.name] = tick
        return item

    @rule(target=entries)
    def add_never(self) -> Item:
        item = Item(self.next_name)
        self.next_name += 1
        self.wheel.add(item, NEVER)
        self.model[item.name] = NEVER
        return item

    @rule(item=consumes(entries))
    def remove(self, item: Item) -> None:
        live = item.name in self.model
        assert self.wheel.remove(item) is live
        self.model.pop(item.name, None)

    @rule(item=entries, delta=ticks)
    def move_later(self, item: Item, delta: int) -> None:
        if item.name not in self.model:
            with pytest.raises(ValueError):
                self.wheel.move(item, self.now)
            return
        tick = self.model[item.name] + delta if self.model[item.name] < NEVER else NEVER
        self.wheel.move(item, tick)
        self.model[item.name] = tick

    @rule(item=entries, delta=ticks)
    def move_earlier(self, item: Item, delta: int) -> None:
        if item.name not in self.model:
            return
        base = self.model[item.name] if self.model[item.name] < NEVER else self.now + 5000
        tick = base - delta
        self.wheel.move(item, tick)
        self.model[item.name] = tick

    @rule(step=ticks)
    def advance(self, step: int) -> None:
        self.now += step
        self._advance()

    @precondition(lambda self: self.wheel.next_expiration() is not None)
    @rule()
    def advance_to_next_expiration(self) -> None:
        nxt = self.wheel.next_expiration()
        assert nxt is not None
        self.now = max(self.now, nxt)
        self._advance()

    def _advance(self) -> None:
        got = self.wheel.advance(self.now)
        names = [i.name for i in got]  # type: ignore[attr-defined]
        expected = sorted(n for n, t in self.model.items() if t <= self.now)
        assert sorted(names) == expected, "due set differs from the model"
        assert len(set(names)) == len(names), "an entry fired twice"
        got_ticks = [self.model[n] for n in names]
        assert got_ticks == sorted(got_ticks), "not in tick order"
        for n in names:
            assert n not in self.fired
            self.fired.add(n)
            del self.model[n]

    @invariant()
    def counts_and_structure(self) -> None:
        assert len(self.wheel) == len(self.model)
        self.wheel.check()
        if not self.model:
            assert self.wheel.live_queue_items() == 0
            assert self.wheel.next_expiration() is None
        else:
            finite = [t for t in self.model.values() if t < NEVER]
            nxt = self.wheel.next_expiration()
            if finite:
                # The driver would wake in time for the earliest deadline.
                assert nxt is not None and nxt <= max(min(finite), self.now)


WheelModel.TestCase.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
TestWheelModel = WheelModel.TestCase


class WheelModel64(WheelModel):
    """The same model on the default shape: 64 slots, 11 levels."""

    def __init__(self) -> None:
        super().__init__()
        self.wheel = Wheel(slots=64)


WheelModel64.TestCase.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)
TestWheelModel64 = WheelModel64.TestCase
