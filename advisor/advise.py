"""Fill a diagnosis with its budget, plan and patch (the later stages)."""


def complete(diagnosis, config=None, gpu=None, model=None, params=None):
    from .rules import rules_by_id
    rule = rules_by_id()[diagnosis.rule]
    diagnosis.plan = [{"action": a} for a in rule.actions[:1] if a != "none"]
    return diagnosis
