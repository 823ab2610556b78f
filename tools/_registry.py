from tools.base import Toolset

CATALOG = Toolset()
