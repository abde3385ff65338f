"""`patchset_overlay.replace`: every in-place change keeps the object's identity and has an exact undo.

Pinned here on plain Python objects (no upstream needed): a function's code swapped with its identity kept, and
refused when a global it reads differs; class attributes set and restored; a dataclass field added to a class and
to each of its dataclass subclasses (their own fields, defaults and factories intact) and taken away again;
module globals added without overwriting; a new function bound to the upstream module's namespace (its globals
checked, but those named new); the function a decorator wraps found through its closure.
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


def overlay_helper(x: int) -> int:
    return upstream_function(x) + SCALE


def test_bound_to_runs_a_new_function_in_the_upstream_modules_namespace():
    module = types.ModuleType("upstream.module")
    module.SCALE = SCALE
    with pytest.raises(replace.ReplaceError, match="global 'upstream_function' differs"):
        replace.bound_to(module, overlay_helper)
    module.upstream_function = lambda x: -x  # the upstream object, to which the patch gives new code
    copy = replace.bound_to(module, overlay_helper, new={"upstream_function"}, qualname="Holder.overlay_helper")
    assert copy is not overlay_helper and copy.__module__ == "upstream.module"
    assert copy.__qualname__ == "Holder.overlay_helper" and copy(3) == -3 + SCALE
    module.SCALE = 3
    with pytest.raises(replace.ReplaceError, match="global 'SCALE' differs"):
        replace.bound_to(module, overlay_helper, new={"upstream_function"})


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


def test_add_dataclass_field_reaches_every_subclass_and_undoes():
    classes = _config_classes()
    base, fsdp, mcore = classes
    before = {cls: [field.name for field in dataclasses.fields(cls)] for cls in classes}
    undo = replace.add_dataclass_field(
        base,
        "loss_scale_factor",
        "int | None",
        None,
        after="loss_agg_mode",
        doc_line="            loss_scale_factor (int): scale.\n",
    )
    for cls in classes:
        names = [field.name for field in dataclasses.fields(cls)]
        assert names[:3] == ["loss_agg_mode", "loss_scale_factor", "cliprange_value"], (cls, names)
    made = mcore(loss_scale_factor=3, tp=2)
    assert (made.loss_scale_factor, made.tp, made.extra, made.strategy) == (3, 2, [], "fsdp")
    assert fsdp().extra is not fsdp().extra, "a default factory still makes a new object per instance"
    assert "loss_scale_factor=3" in repr(made) and "loss_scale_factor (int)" in base.__doc__
    undo()
    assert {cls: [field.name for field in dataclasses.fields(cls)] for cls in classes} == before
    with pytest.raises(TypeError):
        mcore(loss_scale_factor=3)
    assert fsdp().extra == [] and "loss_scale_factor" not in base.__doc__


def test_add_dataclass_field_refuses_an_unknown_anchor():
    base = _config_classes()[0]
    with pytest.raises(replace.ReplaceError, match="no own dataclass field 'missing'"):
        replace.add_dataclass_field(base, "loss_scale_factor", int, None, after="missing")


def test_add_module_globals_never_overwrites_and_removes_only_its_own():
    module = types.ModuleType("upstream")
    module.partial = functools.partial
    undo = replace.add_module_globals(module, {"partial": functools.partial, "get_logger": print})
    assert module.get_logger is print
    undo()
    assert module.partial is functools.partial and not hasattr(module, "get_logger")
    with pytest.raises(replace.ReplaceError, match="different global 'partial'"):
        replace.add_module_globals(module, {"partial": print})


def test_decorated_function_finds_what_a_wrapper_closes_over():
    def decorate(func):
        def wrapper(*args):
            return func(*args)

        return wrapper

    wrapped = decorate(upstream_function)
    assert replace.decorated_function(wrapped) is upstream_function
    with pytest.raises(replace.ReplaceError, match="does not wrap a function called 'func'"):
        replace.decorated_function(upstream_function)
