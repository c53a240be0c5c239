"""Put the raydex Grafana dashboard beside Ray's own, in the Grafana provisioning Ray generates.

::

    <Ray session dir>/metrics/grafana/
        grafana.ini                          grafana-server --config <this>
        provisioning/dashboards/default.yml  a file provider: every JSON in dashboards/ (folder Ray)
        dashboards/default_grafana_dashboard.json, serve_..., data_..., train_...   (Ray's)
        dashboards/raydex_grafana_dashboard.json                                    (install())

Ray writes this folder when its head starts (``/tmp/ray/session_latest`` is a link to the newest
session; ``ray start --temp-dir`` moves it). A Grafana started with that ``grafana.ini`` loads
every dashboard of the folder and re-reads it periodically, so a dashboard copied in appears next
to Ray's, and so does a newer one copied over it. The copy lives as long as the session folder:
install again after a new ``ray start``.

What shows where: the Ray dashboard's Metrics tab embeds panels of Ray's own dashboards (from the
same Grafana, through ``RAY_GRAFANA_HOST``); the raydex panels are a separate Grafana dashboard,
"raydex" in the "Ray" folder of that Grafana, not a part of the tab.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["DASHBOARD", "DASHBOARD_FILE", "default_session_dir", "install"]

#: the dashboard shipped with raydex (package data)
DASHBOARD = Path(__file__).with_name("grafana_dashboard.json")
#: its name in the provisioned folder (Ray's are ``<name>_grafana_dashboard.json``)
DASHBOARD_FILE = "raydex_grafana_dashboard.json"


def default_session_dir(temp_dir: str | None = None) -> Path:
    """``<temp_dir or /tmp/ray>/session_latest``, the newest Ray session on this host."""
    return Path(temp_dir or os.path.join(os.sep, "tmp", "ray")) / "session_latest"


def install(session_dir: Path) -> Path:
    """Copy the raydex dashboard into ``session_dir``'s Grafana dashboards folder; the copy.

    Raises FileNotFoundError when the folder is not a Ray session with Grafana provisioning (no
    head started there, or one started by a Ray that writes none)."""
    folder = session_dir / "metrics" / "grafana" / "dashboards"
    provider = session_dir / "metrics" / "grafana" / "provisioning" / "dashboards"
    if not folder.is_dir() or not provider.is_dir():
        raise FileNotFoundError(
            f"{session_dir} has no Grafana provisioning (metrics/grafana/dashboards and "
            "provisioning/dashboards): is it the session folder of a running Ray head?"
        )
    target = folder / DASHBOARD_FILE
    tmp = folder / f".{DASHBOARD_FILE}.tmp"
    shutil.copyfile(DASHBOARD, tmp)
    os.replace(tmp, target)  # Grafana never reads a half-written file
    return target
