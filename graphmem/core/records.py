"""Frozen dataclasses that cost little to define: :func:`record`.

``@dataclass(frozen=True)`` writes the source of six methods for each class (``__init__``,
``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``) and compiles
it when the module is imported, for every class a command imports: a cost a short
command pays in full (``python -m tools.bench --whole`` times whole commands).
``@record`` makes the same class from a dataclass without methods, methods shared by
every record that read the class's fields when called (``__repr__``, ``__eq__``,
``__hash__``, the frozen ``__setattr__`` and ``__delattr__``), and an ``__init__``
written and compiled as the dataclass writes it, but when the class first makes an
object: a class that a run never instantiates costs none of it, and one that makes a
million objects makes them as fast as the dataclass's own.

A record is a dataclass (``dataclasses.fields``, ``replace``, ``asdict`` and
``is_dataclass`` work, and ``__dataclass_params__`` says ``frozen``), and behaves as
``@dataclass(frozen=True)`` would make it: ``__init__`` takes the fields in order, by
position or name, with their defaults and default factories, then calls
``__post_init__``; ``__repr__``, ``__eq__`` (same class, fields with ``compare``) and
``__hash__`` (fields with ``hash``, else ``compare``) are the dataclass's; assigning or
deleting a field raises ``dataclasses.FrozenInstanceError``; ``__match_args__`` names
the fields and ``inspect.signature`` shows them. A method the class defines itself is
kept. The shared ``__eq__`` and ``__hash__`` are slower than generated ones, but no
planner path compares records in bulk.
(tests/test_records.py holds each behaviour against a ``@dataclass(frozen=True)`` twin.)

Not supported, and refused when the class is made: keyword-only fields and ``InitVar``
pseudo-fields.
"""
from __future__ import annotations

import dataclasses
import reprlib

_MISSING = dataclasses.MISSING


def record(cls=None, /, *, slots: bool = False):
    """``@record`` or ``@record(slots=True)``: ``cls`` as ``@dataclass(frozen=True)``
    (with ``slots``) would make it; see the module's docstring."""
    def wrap(cls):
        return _make(cls, slots)
    return wrap if cls is None else wrap(cls)


def _make(cls, slots: bool):
    own = {name for name in ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__",
                             "__delattr__", "__match_args__") if name in cls.__dict__}
    # dataclass writes a missing docstring from inspect.signature (which compiles
    # tokenize's expressions the first time); a record writes the same text from its
    # own __signature__ (below), which reads the fields
    undocumented = not cls.__doc__
    if undocumented:
        cls.__doc__ = "-"
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False, slots=slots)
    fields = dataclasses.fields(cls)
    named = {f.name for f in fields}
    for f in cls.__dataclass_fields__.values():
        if f.kw_only or (f.name not in named and "InitVar" in str(f.type)):
            raise TypeError(f"@record {cls.__qualname__}.{f.name}: keyword-only and InitVar "
                            f"fields are not supported")
    params = cls.__dataclass_params__  # what the class is: as dataclass(frozen=True)
    params.init = params.repr = params.eq = params.frozen = True
    cls._record_init = tuple((f.name, f.default, f.default_factory) for f in fields if f.init)
    # init=False fields with a default are set to it; one without is __post_init__'s
    cls._record_derived = tuple((f.name, f.default, f.default_factory) for f in fields
                                if not f.init and (f.default is not _MISSING
                                                   or f.default_factory is not _MISSING))
    cls._record_post = getattr(cls, "__post_init__", None) is not None
    cls._record_repr = tuple(f.name for f in fields if f.repr)
    cls._record_compare = tuple(f.name for f in fields if f.compare)
    cls._record_hash = tuple(f.name for f in fields
                             if (f.compare if f.hash is None else f.hash))
    cls._record_names = tuple(f.name for f in fields)
    cls._record_class = cls
    methods = {"__init__": _init, "__repr__": _repr, "__eq__": _eq, "__hash__": _hash,
               "__setattr__": _setattr, "__delattr__": _delattr,
               "__match_args__": tuple(name for name, _, _ in cls._record_init),
               "__signature__": _SIGNATURE}
    if slots:  # as dataclass(frozen=True, slots=True): unpickled and copied field by field
        methods.update(__getstate__=_getstate, __setstate__=_setstate)
    for name, value in methods.items():
        if name not in own:
            setattr(cls, name, value)
    if undocumented:  # dataclass's text, from the signature the record already gives
        cls.__doc__ = cls.__name__ + str(cls.__signature__).replace(" -> None", "")
    return cls


class _Factory:
    """The default of a field with a default factory, in the signature and in the
    compiled ``__init__`` (where it stands for "not given")."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


class _Signature:
    """A record's ``__signature__``: its fields, as the dataclass's ``__init__`` would
    take them (what ``inspect.signature`` and ``help`` show), made when first asked."""

    def __get__(self, obj, cls):
        sig = cls.__dict__.get("_record_signature")
        if sig is None:
            import inspect  # dataclasses imported it already
            fields = {f.name: f for f in dataclasses.fields(cls)}
            sig = inspect.Signature([
                inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                  default=(default if default is not _MISSING else
                                           _FACTORY if factory is not _MISSING else
                                           inspect.Parameter.empty),
                                  annotation=fields[name].type)
                for name, default, factory in cls._record_init], return_annotation=None)
            type.__setattr__(cls, "_record_signature", sig)
        return sig


_SIGNATURE = _Signature()


def _init(self, *args, **kwargs) -> None:
    """A record's first ``__init__``: compiles the class's own (:func:`_compiled_init`),
    which replaces this one, and runs it."""
    cls = type(self)._record_class
    if cls.__dict__.get("__init__") is _init:
        type.__setattr__(cls, "__init__", _compiled_init(cls))
    cls.__init__(self, *args, **kwargs)


def _compiled_init(cls):
    """``cls.__init__`` as the dataclass writes it: each field set with
    ``object.__setattr__``, a default factory called where its field is not given, the
    ``init=False`` fields with a default set to it, then ``__post_init__``. Compiled the
    first time the class makes an object, so a class that an import
    defines and a run never instantiates costs none of it."""
    ns = {"__put": object.__setattr__, "__factory": _FACTORY}
    params, body = [], []
    for i, (name, default, factory) in enumerate(cls._record_init):
        if default is not _MISSING:
            ns[f"__d{i}"] = default
            params.append(f"{name}=__d{i}")
            body.append(f"__put(__self, {name!r}, {name})")
        elif factory is not _MISSING:
            ns[f"__f{i}"] = factory
            params.append(f"{name}=__factory")
            body.append(f"__put(__self, {name!r}, __f{i}() if {name} is __factory else {name})")
        else:
            params.append(name)
            body.append(f"__put(__self, {name!r}, {name})")
    for i, (name, default, factory) in enumerate(cls._record_derived):
        ns[f"__e{i}"] = default if factory is _MISSING else factory
        body.append(f"__put(__self, {name!r}, __e{i}{'' if factory is _MISSING else '()'})")
    if cls._record_post:
        body.append("__self.__post_init__()")
    source = (f"def __init__(__self, {', '.join(params)}):\n    "
              + "\n    ".join(body or ["pass"]))
    exec(source, ns)  # noqa: S102 -- source made above from the field names alone
    init = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    return init


@reprlib.recursive_repr()
def _repr(self) -> str:
    return (f"{type(self).__qualname__}("
            + ", ".join(f"{n}={getattr(self, n)!r}" for n in type(self)._record_repr) + ")")


def _eq(self, other):
    if other.__class__ is self.__class__:
        names = self._record_compare
        return (tuple(getattr(self, n) for n in names)
                == tuple(getattr(other, n) for n in names))
    return NotImplemented


def _hash(self) -> int:
    return hash(tuple(getattr(self, n) for n in self._record_hash))


def _setattr(self, name: str, value) -> None:
    cls = type(self)
    if cls is cls._record_class or name in cls._record_names:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)


def _delattr(self, name: str) -> None:
    cls = type(self)
    if cls is cls._record_class or name in cls._record_names:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
    object.__delattr__(self, name)


def _getstate(self) -> list:
    return [getattr(self, name) for name in self._record_names]


def _setstate(self, state: list) -> None:
    for name, value in zip(self._record_names, state):
        object.__setattr__(self, name, value)
