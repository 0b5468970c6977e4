"""Every exception a package defines is under the package's one base class, so that a
caller can catch all of the window operator's errors (or the stores') in one clause."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import stores
import window_operator
from stores.errors import StoreError
from window_operator.errors import WindowOperatorError, exception_text


def _defined_exceptions(package: ModuleType) -> list[type[BaseException]]:
    """The public exception classes defined (not imported) in every module of
    ``package`` (a private one never leaves its module)."""
    found: list[type[BaseException]] = []
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
        if info.name.endswith(".__main__"):  # runs the CLI when imported
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
                and not obj.__name__.startswith("_")
            ):
                found.append(obj)
    return found


@pytest.mark.parametrize(
    ("package", "base"), [(window_operator, WindowOperatorError), (stores, StoreError)]
)
def test_every_exception_is_under_the_package_base(
    package: ModuleType, base: type[BaseException]
) -> None:
    defined = _defined_exceptions(package)
    assert len(defined) >= 5, defined  # the walk found the package's modules
    outside = sorted(f"{c.__module__}.{c.__qualname__}" for c in defined if not issubclass(c, base))
    assert outside == []


def test_exception_text_names_the_type() -> None:
    assert exception_text(ValueError("bad")) == "ValueError: bad"
    assert exception_text(KeyError()) == "KeyError"


def test_the_errors_the_library_section_names_are_in_window_operator_errors() -> None:
    """README "Library use" names ``StoreLockedError`` among the refusals, "all in
    ``window_operator.errors``"; before, it was only in ``stores.errors``."""
    import window_operator.errors as errors

    for name in ("InvalidArgumentError", "OperatorClosedError", "OperatorFailedError"):
        assert name in errors.__all__
    from stores.errors import StoreLockedError

    assert errors.StoreLockedError is StoreLockedError
    assert "StoreLockedError" in errors.__all__
