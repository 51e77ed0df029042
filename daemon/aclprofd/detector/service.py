"""The regression detector inside the daemon: wiring, the 1 s timer, settings, and the
BASELINE_SAVE / BASELINE_LIST / BASELINE_GET control requests (daemon/PROTOCOL.md).

Kept apart from :mod:`aclprofd.server` and :mod:`aclprofd.control` so that those gain a few
lines only: the aggregator calls :meth:`aclprofd.detector.engine.Detector.observe` per batch with
the histogram deltas it computed anyway; the loop calls :meth:`DetectorService.due` and
:meth:`DetectorService.tick`.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Collection, Hashable
from typing import Any

import structlog

from aclprof.protocol.baselinefmt import check_name
from aclprof.protocol.wire import Kind, ProtocolError, encode, encode_json

from ..aggregate.aggregator import Aggregator
from ..baselinedoc import Built, build
from ..baselines import BaselineStore
from ..config import Settings
from ..conn import Conn
from ..replyfit import Truncations
from ..sockets import DaemonError
from .engine import Detector, DetectorConfig, DetectorView
from .state import Cell

__all__ = ["DetectorService", "detector_config", "TICK_S", "LIVE_SOURCES"]

_log = structlog.get_logger("aclprofd")
TICK_S = 1.0
#: BASELINE_GET names that read the live detector instead of a saved file
LIVE_SOURCES = {"@current": "current", "@trailing": "trailing", "@recent": "recent"}


def detector_config(s: Settings) -> DetectorConfig:
    return DetectorConfig(window_s=s.detector_window_s, trailing_s=s.detector_trailing_s, z=s.detector_z,
                          min_effect=s.detector_min_effect, min_count=s.detector_min_count,
                          persistence=s.detector_persistence)


def host_label(s: Settings) -> str:
    """The daemon's ``host`` label, as on its op histograms."""
    return s.prometheus_host_label or socket.gethostname()


class DetectorService:
    """One daemon's detector and baseline store: observes ``aggregator``, answers the
    BASELINE_* requests with ``reply`` (the daemon's :meth:`aclprofd.server.Daemon.queue`).
    ``settings``: the daemon's at start (the live ones come with :meth:`reload`).
    ``live_owners()``: the owners (``aclprofd.shares.owner_of``) of the agents connected
    now, whose cells never age out."""

    def __init__(self, settings: Settings, aggregator: Aggregator, reply: Callable[[Conn, bytes], None], *,
                 live_owners: Callable[[], Collection[Hashable]] = frozenset,
                 truncations: Truncations | None = None) -> None:
        self.settings = settings
        #: rows the bounded baseline documents left out (aclprofd.baselinedoc), counted daemon-wide
        self.truncations = truncations if truncations is not None else Truncations()
        self.aggregator = aggregator
        self.reply = reply
        owners = aggregator.keys.owner
        self.detector = Detector(self._identity(), detector_config(settings), owner=owners.__getitem__,
                                 max_cells_per_owner=settings.max_cells_per_agent,
                                 max_cells_per_uid=settings.max_cells_per_uid, live_owners=live_owners,
                                 table_idle_s=settings.table_idle_timeout_s)
        self.detector.host = host_label(settings)
        self.baselines = BaselineStore(settings.data_dir)
        aggregator.observer = self.observe
        aggregator.cells = self.detector.store  # what observe does, in the aggregator's C call per frame
        aggregator.on_renumber = self.detector.store.renumber_keys  # aggregate keys aged out
        self.next_tick = 0.0
        #: exceptions in the detector (a bug): logged with the traceback, counted in STATUS;
        #: ingestion and the loop go on without the detector's view of that batch or second
        self.errors = 0
        self.handlers: dict[Kind, Callable[[Conn, dict[str, Any]], None]] = {
            Kind.BASELINE_SAVE: self.save, Kind.BASELINE_LIST: self.listing, Kind.BASELINE_GET: self.get}

    def _identity(self) -> Callable[[int], Cell | None]:
        agg = self.aggregator

        def identity(key: int) -> Cell | None:
            reg = agg.keys
            if key == reg.other:
                return None  # mixes every op beyond the key cap: nothing to judge
            # "name@version" when the service labelled the model, else its (per process) id
            model = reg.model_label[key] or str(int(reg.model[key]))
            return (reg.service[key] or "", model, reg.type[key], reg.name[key])
        return identity

    # ---- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Pin the configured baseline; DaemonError naming the file when it cannot be used."""
        name = self.settings.detector_baseline
        if name:
            try:
                self.detector.pin(name, self.baselines.load(name))
            except FileNotFoundError:
                raise DaemonError(f"detector_baseline {name!r}: no file {self.baselines.path(name)} (save it with "
                                  f"`aclprof baseline save {name}` on a daemon without this setting)") from None
            except (OSError, ValueError) as exc:
                raise DaemonError(f"detector_baseline {name!r}: {exc}") from None

    def due(self, mono: float) -> float:
        """Seconds until the next evaluation (0 when due)."""
        return max(0.0, self.next_tick - mono)

    @property
    def published(self) -> DetectorView:
        """The detector's last view (any thread: one immutable object)."""
        return self.detector.published

    def observe(self, hcodes: Any, hcount: Any) -> None:
        """The aggregator's observer: one batch's histogram deltas."""
        try:
            self.detector.observe(hcodes, hcount)
        except Exception:
            self._failed("observe")

    def tick(self, mono: float) -> None:
        """Evaluate when due (once per TICK_S on the loop)."""
        if mono < self.next_tick:
            return
        self.next_tick = mono + TICK_S
        try:
            self.detector.tick(time.time())
        except Exception:
            self._failed("tick")

    def _failed(self, where: str) -> None:
        self.errors += 1
        if self.errors <= 10 or self.errors % 1000 == 0:  # a bug that repeats must not flood the log
            _log.exception("regression detector failed (a bug)", where=where, errors=self.errors)

    def reset(self) -> None:
        """RESET: the cells of agents that are gone go at the next evaluation (not after
        ``table_idle_timeout``), so their room is the live agents' again."""
        self.detector.forget_gone()

    def table_stats(self) -> dict[str, int]:
        """STATUS ``tables.detector_cells``: the cells and their per-agent share."""
        return self.detector.store.stats()

    def status(self) -> dict[str, Any]:
        """The STATUS reply's ``detector`` object."""
        return {**self.detector.status(), "errors": self.errors}

    def reload(self, s: Settings) -> None:
        """SIGHUP: thresholds change in place; a new ``detector_baseline`` is pinned (or the
        trailing one restored). A baseline that cannot be loaded keeps the running one."""
        self.settings = s
        cfg = detector_config(s)
        self.detector.host = host_label(s)
        self.detector.store.shares.per_owner = s.max_cells_per_agent
        self.detector.store.shares.per_uid = s.max_cells_per_uid
        self.detector.table_idle_s = s.table_idle_timeout_s
        old = self.detector.config
        # window and trailing need a restart (their histograms are built with them)
        self.detector.config = DetectorConfig(old.window_s, old.trailing_s, cfg.z, cfg.min_effect,
                                              cfg.min_count, cfg.persistence)
        name = s.detector_baseline
        if name == self.detector.pinned_name:
            return
        if name is None:
            self.detector.unpin()
            _log.info("detector baseline", baseline="trailing")
            return
        try:
            self.detector.pin(name, self.baselines.load(name))
        except (OSError, ValueError) as exc:
            _log.error("cannot pin the detector baseline; keeping the running one", baseline=name,
                       error=str(exc), running=self.detector.pinned_name or "trailing")
            return
        _log.info("detector baseline", baseline=name)

    # ---- control requests ---------------------------------------------------------------
    def save(self, conn: Conn, req: dict[str, Any]) -> None:
        """BASELINE_SAVE ``{"name", "source"?}``: the detector's histograms to a file."""
        name, source = req.get("name"), req.get("source", "recent")
        if source not in ("recent", "current", "trailing"):
            raise ProtocolError("BASELINE_SAVE: source must be recent, current or trailing")
        try:
            check_name(name)
            now = time.time()
            doc = self._document(str(name), source, {"saved_ts": now, "host": host_label(self.settings),
                                                     "window_s": self.detector.config.window_s,
                                                     "trailing_s": self.detector.config.trailing_s})
            size = self.baselines.save_bytes(str(name), doc.data)
        except ValueError as exc:
            raise ProtocolError(f"BASELINE_SAVE: {exc}") from None
        except OSError as exc:
            # the disk's fault, not the client's: an ERROR reply, the connection stays
            self.reply(conn, encode_json(Kind.ERROR, {"message": f"BASELINE_SAVE: cannot write "
                                                        f"{self.baselines.path(str(name))}: {exc.strerror or exc}"}))
            return
        _log.info("baseline saved", name=name, source=source, rows=doc.rows, bytes=size, by_pid=conn.pid,
                  rows_left_out=doc.rows_left_out)
        reply: dict[str, Any] = {"name": name, "source": source, "saved_ts": now, "rows": doc.rows, "bytes": size,
                                 "path": self.baselines.path(str(name))}
        if doc.rows_left_out:
            reply["truncated"] = {"rows": doc.rows_left_out, "services": len(doc.services_cut)}
        self.reply(conn, encode_json(Kind.BASELINE_SAVE_REPLY, reply))

    def _document(self, name: str, source: str, meta: dict[str, Any]) -> Built:
        """The detector's cells as a baseline document within its byte budget (the rows left
        out are in the document and counted: aclprofd.baselinedoc)."""
        cells, hists = self.detector.store.cell_hists(source)
        doc = build(name, cells, hists, {"source": source, **meta})
        if doc.rows_left_out:
            self.truncations.note({}, "baseline", {"rows": doc.rows_left_out})
            _log.warning("baseline document cut to its byte budget", name=name, rows=doc.rows,
                         rows_left_out=doc.rows_left_out, services_cut=len(doc.services_cut))
        return doc

    def listing(self, conn: Conn, req: dict[str, Any]) -> None:
        """BASELINE_LIST ``{}``: the saved baselines and the one in use."""
        self.reply(conn, encode_json(Kind.BASELINE_LIST_REPLY, {
            "baselines": self.baselines.listing(), "active": self.detector.pinned_name or "trailing",
            "dir": self.baselines.dir}))

    def get(self, conn: Conn, req: dict[str, Any]) -> None:
        """BASELINE_GET ``{"name"}``: a saved baseline's document, or the live histograms
        (``@current``, ``@trailing``, ``@recent``)."""
        name = req.get("name")
        live = LIVE_SOURCES.get(name) if isinstance(name, str) else None
        if live is not None:
            data = self._document("live", live, {"saved_ts": time.time(), "host": host_label(self.settings)}).data
        else:
            try:
                data = self.baselines.load_bytes(check_name(name))
            except FileNotFoundError:
                raise ProtocolError(f"BASELINE_GET: no baseline named {name!r} (see BASELINE_LIST)") from None
            except (OSError, ValueError) as exc:
                raise ProtocolError(f"BASELINE_GET: {exc}") from None
        # the JSON as built or saved (checked, at most MAX_BYTES): not parsed and encoded again
        self.reply(conn, encode(Kind.BASELINE_GET_REPLY, data))
