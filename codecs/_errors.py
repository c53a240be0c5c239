"""The one exception every raydex decoder raises for bad input.

Invariant: a decoder given untrusted bytes or JSON either returns a well-formed value or raises
:class:`CodecError`; any other exception escaping a decoder is a bug (the fuzz suite enforces this).
Callers on the request path catch ``CodecError`` only and answer with its :attr:`CodecError.code`.

``CodecError`` subclasses ``ValueError`` so generic "bad value" handlers still work.
"""

from __future__ import annotations

from ._enums import ResultCode


class CodecError(ValueError):
    """Bad input to a decoder: truncated, trailing bytes, out of range, unknown tag, bad text...

    ``type_name`` and ``field`` name what was being decoded (empty when unknown); ``code`` is the
    result code the API answers with (``INVALID_TX_INFO`` unless the tx type itself is unknown).
    """

    def __init__(
        self,
        message: str,
        *,
        type_name: str = "",
        field: str = "",
        code: ResultCode = ResultCode.INVALID_TX_INFO,
    ) -> None:
        where = f"{type_name}.{field}" if type_name and field else type_name or field
        super().__init__(f"{where}: {message}" if where else message)
        self.type_name = type_name
        self.field = field
        self.code = code
