"""Pure policy: disruption budgets, node limits, over-limit ordering and the budget calendar.

No I/O and no wall clock: every instant is a parameter.
"""
