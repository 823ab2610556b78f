from core.errors import UserError


class PlanInvalid(UserError):
    """A plan failed validation; `reasons` lists every problem found, not just the first."""

    code = "plan_invalid"

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons
