import pytest

# Backends that exist only on asyncio: psycopg's AsyncConnection and SAQ do
# not run under trio. Their trio combinations are not tests that could run
# here, so they are deselected at collection (counted as such) rather than
# collected and skipped one by one.
ASYNCIO_ONLY_PARAMS = frozenset({"postgres", "saq"})


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _impossible(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is None or callspec.params.get("anyio_backend") != "trio":
        return False
    return any(value in ASYNCIO_ONLY_PARAMS for value in callspec.params.values()
               if isinstance(value, str))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    dropped = [item for item in items if _impossible(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not _impossible(item)]


@pytest.fixture(autouse=True)
def _logging_enabled() -> None:
    """Each test starts with logging enabled. The CLI, the campaign runner and the
    rules sweep silence logging process-wide (`logging.disable`) when they run
    in-process, so a test after them that asserts on a log record (caplog) would
    otherwise depend on the order tests run in."""
    import logging

    logging.disable(logging.NOTSET)
