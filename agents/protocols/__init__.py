from agents.protocols import aetheria  # noqa: F401
from agents.protocols import aam  # noqa: F401
from agents.protocols import committee  # noqa: F401
from agents.protocols import maj  # noqa: F401
import eval.baselines  # noqa: F401  (keyword, single_judge, guard models, moderation)
