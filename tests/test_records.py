"""graphmem.core.records: a ``@record`` class behaves as its ``@dataclass(frozen=True)``
twin, on every behaviour the planner and its users rely on."""
from __future__ import annotations

import copy
import dataclasses
import importlib
import pickle
import pkgutil
from dataclasses import dataclass, field

import pytest

from graphmem.core import records
from graphmem.core.records import record


def _pair(slots: bool):
    """The same class made by @record and by @dataclass(frozen=True)."""
    made = []
    for deco in (record(slots=slots), dataclass(frozen=True, slots=slots)):
        @deco
        class Item:
            """One item."""

            name: str
            shape: tuple
            attrs: dict = field(default_factory=dict, compare=False, hash=False)
            note: str = field(default="", repr=False)
            size: int = field(init=False, repr=False, compare=False)

            def __post_init__(self) -> None:
                object.__setattr__(self, "size", len(self.shape))
        made.append(Item)
    return made


@pytest.mark.parametrize("slots", [False, True])
def test_a_record_behaves_as_its_frozen_dataclass_twin(slots):
    rec, dc = _pair(slots)
    for args, kwargs in [(("a", (1, 2)), {}), (("a",), {"shape": (3,), "note": "x"}),
                         ((), {"name": "b", "shape": (), "attrs": {"k": 1}})]:
        r, d = rec(*args, **kwargs), dc(*args, **kwargs)
        assert repr(r).replace("Item", "") == repr(d).replace("Item", "")
        assert dataclasses.asdict(r) == dataclasses.asdict(d)
        assert hash(r) == hash(d)
        assert r.size == d.size == len(r.shape)
        assert r == rec(*args, **kwargs) and r != d  # another class: not equal
    # fields the twin compares (name, shape, note) and those it does not (attrs)
    assert rec("a", (1,), {"x": 1}) == rec("a", (1,), {"y": 2})
    assert rec("a", (1,)) != rec("a", (1,), note="n")
    assert rec("a", (1,)).attrs is not rec("a", (1,)).attrs  # a fresh default each time
    assert [f.name for f in dataclasses.fields(rec)] == [f.name for f in dataclasses.fields(dc)]
    assert rec.__match_args__ == dc.__match_args__
    assert dataclasses.is_dataclass(rec) and rec.__dataclass_params__.frozen
    assert dataclasses.replace(rec("a", (1,)), shape=(1, 2)).size == 2
    assert hasattr(rec("a", ()), "__dict__") is (not slots)


@pytest.mark.parametrize("slots", [False, True])
def test_a_record_refuses_what_its_twin_refuses_with_the_same_error(slots):
    rec, dc = _pair(slots)

    def error(cls, *args, **kwargs):
        with pytest.raises(TypeError) as caught:
            cls(*args, **kwargs)
        return str(caught.value).replace("_pair.<locals>.", "")

    for args, kwargs in [((), {}), (("a",), {}), (("a", (), {}, "n", 5), {}),
                         (("a", ()), {"name": "b"}), (("a", ()), {"size": 3}),
                         (("a", ()), {"other": 1})]:
        assert error(rec, *args, **kwargs) == error(dc, *args, **kwargs)
    r = rec("a", ())
    for act in (lambda: setattr(r, "name", "b"), lambda: setattr(r, "new", 1),
                lambda: delattr(r, "name")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            act()


@pytest.mark.parametrize("slots", [False, True])
def test_a_record_pickles_and_copies(slots):
    rec, _ = _pair(slots)
    globals()["Item"] = rec  # pickle finds a class by its module and name
    rec.__qualname__ = "Item"
    try:
        r = rec("a", (1, 2), {"k": [1]}, note="n")
        for other in (pickle.loads(pickle.dumps(r)), copy.copy(r), copy.deepcopy(r)):
            assert other == r and other.attrs == r.attrs and other.size == 2
    finally:
        del globals()["Item"]


def test_a_subclass_may_be_a_frozen_dataclass_or_a_plain_class():
    rec, _ = _pair(False)

    @dataclass(frozen=True)
    class More(rec):
        extra: int = 0

    m = More("a", (1,), extra=3)
    assert m.extra == 3 and m.size == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.extra = 4

    class Plain(rec):
        pass

    p = Plain("a", ())
    p.cache = 1  # not a field: a plain subclass may add attributes, as with dataclasses
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.name = "b"


def test_methods_the_class_writes_itself_are_kept():
    @record
    class Named:
        """A record whose repr is its own."""

        name: str

        def __repr__(self) -> str:
            return f"<{self.name}>"

    assert repr(Named("x")) == "<x>"


def test_keyword_only_and_initvar_fields_are_refused():
    with pytest.raises(TypeError, match="keyword-only"):
        @record
        class KwOnly:
            a: int = field(kw_only=True)

    with pytest.raises(TypeError, match="InitVar"):
        @record
        class WithInitVar:
            a: int
            b: dataclasses.InitVar[int]


def _graphmem_modules():
    import graphmem
    import graphmem.passes
    for package in (graphmem, graphmem.passes):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not info.name.endswith(".__main__"):  # that one runs the command line
                yield info.name


def test_every_frozen_class_of_graphmem_is_a_record():
    """One way to make a frozen class in graphmem: ``@record``, whose import costs no
    compiled methods (a ``@dataclass(frozen=True)`` costs about 1.3 ms)."""
    found, plain = [], []
    for name in _graphmem_modules():
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if (isinstance(cls, type) and cls.__module__ == name
                    and dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):
                (found if "_record_class" in vars(cls) else plain).append(cls.__qualname__)
    assert not plain, f"frozen dataclasses that are not records: {plain}"
    assert {"Tensor", "Node", "Graph", "Plan", "TensorPlan", "Assignment", "Pass"} <= set(found)


def test_an_undocumented_record_gets_its_twins_docstring():
    made = []
    for deco in (record, dataclass(frozen=True)):
        @deco
        class Bare:
            a: int
            b: "str | None" = None
            c: dict = field(default_factory=dict)
            d: tuple[int, int] = (1, 2)
        made.append(Bare.__doc__)
    assert made[0] == made[1]


@pytest.mark.parametrize("slots", [False, True])
def test_a_records_signature_is_its_twins(slots):
    import inspect
    rec, dc = _pair(slots)
    assert str(inspect.signature(rec)) == str(inspect.signature(dc))
    assert str(inspect.signature(rec)) == ("(name: 'str', shape: 'tuple', attrs: 'dict' = "
                                           "<factory>, note: 'str' = '') -> None")


def test_a_records_init_is_compiled_when_it_first_makes_an_object():
    rec, _ = _pair(True)
    assert rec.__init__ is records._init  # nothing compiled at import
    rec("a", ())
    assert rec.__init__ is not records._init and rec.__init__.__qualname__.endswith(
        "Item.__init__")

    rec2, _ = _pair(False)

    class Sub(rec2):  # a subclass's first object compiles the record's own
        pass

    assert Sub("a", (1,)).size == 1 and rec2.__init__ is not records._init
