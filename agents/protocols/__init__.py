from agents.protocols import (
    aam,  # noqa: F401
    aetheria,  # noqa: F401
    committee,  # noqa: F401
    maj,  # noqa: F401
)
from eval import baselines  # noqa: F401  (keyword, single_judge, guard models, moderation)
