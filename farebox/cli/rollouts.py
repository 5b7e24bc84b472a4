"""``farebox rollouts``: config canaries from the config host (``proxy.control.rollout``), on the config database
every mode shares; the same steps as the admin API's ``/admin/v1/rollouts``.

    farebox rollouts list --config PATH [--json]
    farebox rollouts start --config PATH [--stages 5,25,100] [--window-s 300] [--pods P1,P2]
                                         [--min-requests 20] [--max-error-points 5] [--max-429-points 5]
                                         [--max-p95-ratio 1.5] [--max-cost-ratio 1.25]
    farebox rollouts pause|resume|widen|rollback ID --config PATH

``start`` arms one: the next config version published (``farebox config apply``, any admin change) is served
to its slice, compared with the rest and widened or rolled back by the gateways. The steps by hand are audited
under the CLI's user; the gateways notice them and record the ``config.rollout`` event. A bad option or an
unknown id is a clear message and exit 2.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from typing import Any


def _db(config: str) -> Any:
    from farebox.control import open_config_db
    from farebox.settings import load_settings

    return open_config_db(load_settings(config))


def _list(args: argparse.Namespace) -> int:
    from proxy.control.rollout_store import listing

    rows = listing(_db(args.config))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'id':>4} {'state':<12} {'stage':>6} {'baseline':>8} {'candidate':>9}  candidate / baseline figures, reason")
    for r in rows:
        c, b = r["figures"]["candidate"], r["figures"]["baseline"]
        figures = (f"{c['requests']} req {c['error_pct']}% err p95 {c['p95_ms']} ms / "
                   f"{b['requests']} req {b['error_pct']}% err p95 {b['p95_ms']} ms")
        print(f"{r['id']:>4} {r['state']:<12} {str(r['pct']) + '%':>6} {r['baseline']:>8} {r['candidate'] or '-':>9}  "
              f"{figures}{'; ' + r['reason'] if r['reason'] else ''}")
    return 0


def _start(args: argparse.Namespace) -> int:
    from farebox.cli.control import _actor
    from proxy.control.rollout_store import start

    try:
        stages = [int(s) for s in args.stages.split(",")]
    except ValueError:
        stages = args.stages  # refused by name below
    body: dict[str, Any] = {"stages": stages, "window_s": args.window_s,
                            "pods": [p for p in (args.pods or "").split(",") if p], "thresholds": {}}
    for name, value in (("min_requests", args.min_requests), ("max_error_pct_points", args.max_error_points),
                        ("max_429_pct_points", args.max_429_points), ("max_p95_ratio", args.max_p95_ratio),
                        ("max_cost_ratio", args.max_cost_ratio)):
        if value is not None:
            body["thresholds"][name] = value
    view = start(_db(args.config), _actor(), body)
    print(f"rollout {view['id']} armed on baseline version {view['baseline']}: the next version published is "
          f"served to {', '.join(view['pods']) or str(view['pct']) + '% of callers'} first")
    return 0


def _step(args: argparse.Namespace) -> int:
    from farebox.cli.control import _actor
    from proxy.control.rollout_store import by_hand, revert

    db = _db(args.config)
    _, after = by_hand(db, _actor(), args.id, args.rollouts_command, datetime.now(timezone.utc))
    if args.rollouts_command == "rollback":
        version = revert(db, after, _actor())
        print(f"rollout {args.id}: rolled back; the baseline's routing is version {version}")
    else:
        print(f"rollout {args.id}: {after.state} at {after.pct}%")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("rollouts", help="config canaries").add_subparsers(dest="rollouts_command", required=True)
    ls = group.add_parser("list", help="the newest rollouts with their figures")
    ls.add_argument("--config", required=True)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_list)
    st = group.add_parser("start", help="arm one: the next version published goes to a slice first")
    st.add_argument("--config", required=True)
    st.add_argument("--stages", default="5,25,100", help="rising percentages ending at 100")
    st.add_argument("--window-s", type=float, default=300.0, help="seconds each stage is watched")
    st.add_argument("--pods", help="named pods instead of a share of callers")
    st.add_argument("--min-requests", type=int)
    st.add_argument("--max-error-points", dest="max_error_points")
    st.add_argument("--max-429-points", dest="max_429_points")
    st.add_argument("--max-p95-ratio", dest="max_p95_ratio")
    st.add_argument("--max-cost-ratio", dest="max_cost_ratio")
    st.set_defaults(func=_start)
    for action in ("pause", "resume", "widen", "rollback"):
        step = group.add_parser(action, help=f"{action} a rollout by hand")
        step.add_argument("id", type=int)
        step.add_argument("--config", required=True)
        step.set_defaults(func=_step)
