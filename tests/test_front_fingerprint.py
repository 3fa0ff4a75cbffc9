"""The cache of elaborated programs is keyed by the code of the packages that build them; a
package the front end imports but the key leaves out would serve stale programs after an edit
(it did: gradients built by caten/autodiff were cached under a key that ignored its code)."""

import subprocess
import sys

from caten.run.module import FRONT_PACKAGES

# imported by the front end but unable to change a Program's graph: errors, caching, options
_INERT = {"errors", "cache", "deep", "version", "options", "target"}


def test_every_package_the_front_end_imports_is_in_the_fingerprint():
    code = ("import sys, caten.elaborate.elaborator, caten.rewrite.engine\n"
            "print(' '.join(sorted({m.split('.')[1] for m in sys.modules if m.startswith('caten.') })))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    loaded = {m for m in out if m not in _INERT}
    missing = sorted(loaded - set(FRONT_PACKAGES))
    assert not missing, f"not in the program-cache fingerprint: {missing}"
