"""The one error a parser raises: where in the bytes, and what was expected there."""


class FormatError(ValueError):
    def __init__(self, offset: int, expected: str) -> None:
        super().__init__(f"at byte {offset}: {expected}")
        self.offset = offset
        self.expected = expected
