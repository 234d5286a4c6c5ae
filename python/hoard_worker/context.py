"""The context object handed to handlers, shaped like AWS Lambda's."""

from __future__ import annotations

import os
import time

# Without a timeout the deadline is Lambda's largest: 15 minutes.
MAX_TIMEOUT_MS = 15 * 60 * 1000


class LambdaContext:
    """The second argument of ``handler(event, context)``.

    Its attributes mirror the AWS Lambda Python runtime's, including their
    types: ``memory_limit_in_mb`` is a string there, so it is one here.
    ``invoked_function_arn`` is ``arn:hoard:function:APP:FN`` (APP from
    ``$HOARD_APP``).
    """

    def __init__(
        self,
        *,
        request_id: str,
        function_name: str,
        memory_limit_mb: int,
        deadline: float,
        log_stream_name: str,
    ) -> None:
        app = os.environ.get("HOARD_APP") or "default"
        self.aws_request_id = request_id
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = str(memory_limit_mb)
        self.invoked_function_arn = f"arn:hoard:function:{app}:{function_name}"
        self.log_group_name = f"/hoard/{app}/{function_name}"
        self.log_stream_name = log_stream_name
        self.identity = None
        self.client_context = None
        self._deadline = deadline  # time.monotonic() seconds

    def get_remaining_time_in_millis(self) -> int:
        """The milliseconds left before the agent kills the invocation."""
        return max(0, int((self._deadline - time.monotonic()) * 1000))

    def __repr__(self) -> str:
        return (
            f"LambdaContext(aws_request_id={self.aws_request_id!r}, function_name={self.function_name!r}, "
            f"memory_limit_in_mb={self.memory_limit_in_mb!r})"
        )
