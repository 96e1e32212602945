"""services/cli/errors.py: third-party errors map into the project's tree, and each class has its exit code."""

from __future__ import annotations

import argparse
import errno

import pytest
import redis
from kafka.errors import KafkaTimeoutError

from schemas.errors import BackendUnavailableError, ConfigError, GovernorError, InvalidInputError, StaleVersionError
from services.cli.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_UNAVAILABLE,
    exit_code,
    one_line,
    run_handler,
    translate,
)


class TestTranslate:
    def test_a_kafka_error_is_the_broker_not_answering(self) -> None:
        translated = translate(KafkaTimeoutError("Unable to bootstrap from 127.0.0.1:1"))
        assert isinstance(translated, BackendUnavailableError)
        assert translated.backend == "kafka"

    def test_a_redis_error_is_redis_not_answering(self) -> None:
        translated = translate(redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."))
        assert isinstance(translated, BackendUnavailableError)
        assert translated.backend == "redis"

    def test_an_address_in_use_is_a_config_error(self) -> None:
        assert isinstance(translate(OSError(errno.EADDRINUSE, "Address already in use")), ConfigError)

    def test_anything_else_is_left_alone_as_a_bug(self) -> None:
        assert translate(KeyError("x")) is None
        assert translate(OSError(errno.ENOENT, "No such file")) is None


class TestExitCodes:
    @pytest.mark.parametrize(
        ("error", "code"),
        [
            (InvalidInputError("bad line"), EXIT_BAD_INPUT),
            (ConfigError("bad setting"), EXIT_BAD_INPUT),
            (BackendUnavailableError("away", backend="redis"), EXIT_UNAVAILABLE),
            (StaleVersionError("older", key="k", offered_version=1, stored_version=2), EXIT_FAILED),
        ],
    )
    def test_each_class_has_its_code(self, error: GovernorError, code: int) -> None:
        assert exit_code(error) == code

    def test_a_message_over_several_lines_is_printed_on_one(self) -> None:
        assert one_line("1 validation error\n  field\n    Input should be a number\n") == (
            "1 validation error field Input should be a number"
        )


class TestRunHandler:
    def test_an_everyday_failure_prints_one_line_and_returns_its_code(self, capsys: pytest.CaptureFixture[str]) -> None:
        def handler(args: argparse.Namespace) -> int:
            raise redis.ConnectionError("refused")

        assert run_handler(handler, argparse.Namespace()) == EXIT_UNAVAILABLE
        assert capsys.readouterr().err == "governor: error: redis did not answer: refused\n"

    def test_ctrl_c_is_a_clean_exit_130(self, capsys: pytest.CaptureFixture[str]) -> None:
        def handler(args: argparse.Namespace) -> int:
            raise KeyboardInterrupt

        assert run_handler(handler, argparse.Namespace()) == EXIT_INTERRUPTED
        assert capsys.readouterr().err == "governor: interrupted\n"

    def test_a_bug_keeps_its_traceback(self) -> None:
        def handler(args: argparse.Namespace) -> int:
            raise KeyError("bug")

        with pytest.raises(KeyError):
            run_handler(handler, argparse.Namespace())
