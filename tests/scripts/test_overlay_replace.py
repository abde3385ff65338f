"""`patchset_overlay.replace`: every in-place change keeps the object's identity and has an exact undo.

Pinned here on plain Python objects (no upstream needed): a function's code swapped with its identity kept, and
refused when a global it reads differs; class attributes set and restored; a dataclass field added to a class and
to each of its dataclass subclasses (their own fields, defaults and factories intact), or its default changed, and
taken away again; module globals added without overwriting.
"""

from __future__ import annotations

import dataclasses
import functools
import types

import pytest

from patchset_overlay import replace

SCALE = 2


def upstream_function(x: int) -> int:
    """Upstream's."""
    return x * SCALE


def overlay_function(x: int, y: int = 1) -> int:
    """The overlay's."""
    return x * SCALE + y


def test_replace_function_code_keeps_the_object_and_undoes_exactly():
    target = types.FunctionType(upstream_function.__code__, globals(), "upstream_function")
    alias, bound = target, functools.partial(target, 3)
    undo = replace.replace_function_code(target, overlay_function)
    assert alias(3) == bound() == 7 and target.__doc__ == "The overlay's."
    undo()
    assert target(3) == 6 and target.__doc__ == "Upstream's." and target.__defaults__ is None


def test_replace_function_code_refuses_a_different_global():
    namespace = {"SCALE": 3}
    exec("def upstream(x):\n    return x * SCALE\n", namespace)
    target = namespace["upstream"]
    with pytest.raises(replace.ReplaceError, match="global 'SCALE' differs"):
        replace.replace_function_code(target, overlay_function)
    assert target(1) == 3, "nothing may change when it is refused"


def test_replaced_code_reads_the_upstream_modules_own_name():
    namespace = {"__name__": "upstream.module"}
    exec("def upstream():\n    return None\n", namespace)
    target = namespace["upstream"]

    def overlay() -> str:
        return __name__

    replace.replace_function_code(target, overlay)
    assert target() == "upstream.module"


def test_set_class_attributes_adds_and_restores():
    class Loss:
        kind = "upstream"

    undo = replace.set_class_attributes(Loss, {"kind": "overlay", "group_size": 2})
    assert (Loss.kind, Loss.group_size) == ("overlay", 2)
    undo()
    assert Loss.kind == "upstream" and not hasattr(Loss, "group_size")


def _config_classes():
    @dataclasses.dataclass
    class CriticConfig:
        """Critic.

        Args:
            loss_agg_mode (str): how.
            cliprange_value (float): clip.
        """

        loss_agg_mode: str = "token-mean"
        cliprange_value: float = 0.5

    @dataclasses.dataclass
    class FSDPCriticConfig(CriticConfig):
        strategy: str = "fsdp"
        extra: list = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=False)
    class McoreCriticConfig(FSDPCriticConfig):
        tp: int = 1

    return CriticConfig, FSDPCriticConfig, McoreCriticConfig


def test_set_dataclass_field_reaches_every_subclass_and_undoes():
    classes = _config_classes()
    base, fsdp, mcore = classes
    before = {cls: [field.name for field in dataclasses.fields(cls)] for cls in classes}
    undo = replace.set_dataclass_field(base, "loss_scale_factor", "int | None", None, after="loss_agg_mode")
    for cls in classes:
        names = [field.name for field in dataclasses.fields(cls)]
        assert names[:3] == ["loss_agg_mode", "loss_scale_factor", "cliprange_value"], (cls, names)
    made = mcore(loss_scale_factor=3, tp=2)
    assert (made.loss_scale_factor, made.tp, made.extra, made.strategy) == (3, 2, [], "fsdp")
    assert fsdp().extra is not fsdp().extra, "a default factory still makes a new object per instance"
    assert "loss_scale_factor=3" in repr(made)
    undo()
    assert {cls: [field.name for field in dataclasses.fields(cls)] for cls in classes} == before
    with pytest.raises(TypeError):
        mcore(loss_scale_factor=3)
    assert fsdp().extra == []


def test_set_dataclass_field_changes_a_default_in_place_and_undoes():
    base, fsdp, _ = _config_classes()
    undo = replace.set_dataclass_field(base, "cliprange_value", "float | None", None, after=None)
    assert base().cliprange_value is None and fsdp().cliprange_value is None
    assert [field.name for field in dataclasses.fields(base)] == ["loss_agg_mode", "cliprange_value"]
    undo()
    assert base().cliprange_value == 0.5 and fsdp().cliprange_value == 0.5


def test_set_dataclass_field_refuses_an_unknown_anchor():
    base = _config_classes()[0]
    with pytest.raises(replace.ReplaceError, match="no own dataclass field 'missing'"):
        replace.set_dataclass_field(base, "loss_scale_factor", int, None, after="missing")


def test_add_module_globals_never_overwrites_and_removes_only_its_own():
    module = types.ModuleType("upstream")
    module.partial = functools.partial
    undo = replace.add_module_globals(module, {"partial": functools.partial, "get_logger": print})
    assert module.get_logger is print
    undo()
    assert module.partial is functools.partial and not hasattr(module, "get_logger")
    with pytest.raises(replace.ReplaceError, match="different global 'partial'"):
        replace.add_module_globals(module, {"partial": print})
