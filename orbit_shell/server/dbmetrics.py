"""What the database says about purge, read at each scrape of ``/metrics``.

A transaction left open anywhere on the server (a backup with ``--single-transaction``, a
report, an idle session that began one) keeps InnoDB's purge from removing the index entries
every claimed task leaves at the head of its queue, and each claim and long-poll probe then
steps over all of them (README, Operating; bench/README.md). Two gauges say when
that is happening: InnoDB's history list length (undo logs purge has not processed) and the
age of the oldest open InnoDB transaction, its usual cause.

Both views need the PROCESS privilege. Without it the gauges are left out and the server says
so once; an unreachable database leaves them out of that scrape only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pymysql
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from orbit_shell import errors
from orbit_shell.engine.db import Database

log = logging.getLogger("orbit.metrics")

ER_SPECIFIC_ACCESS_DENIED = 1227  # "you need the PROCESS privilege"
QUERY = (
    "SELECT (SELECT `count` FROM information_schema.INNODB_METRICS "
    "WHERE name = 'trx_rseg_history_len') AS history, "
    "(SELECT COALESCE(MAX(TIMESTAMPDIFF(MICROSECOND, trx_started, NOW(6))), 0) "
    "FROM information_schema.INNODB_TRX) AS oldest_us"
)


class PurgeCollector(Collector):
    """The two gauges, from one query on a pooled connection per scrape."""

    def __init__(self, database: Database) -> None:
        self.db = database
        self.refused = False  # no PROCESS privilege: said once, then not asked again

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self.refused:
            return
        try:
            with self.db.connection() as conn, conn.cursor() as cur:
                cur.execute(QUERY)
                row = cur.fetchone()
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] == ER_SPECIFIC_ACCESS_DENIED:
                self.refused = True
                log.warning(
                    "metrics: the database account may not read InnoDB's purge state (%s); "
                    "grant it PROCESS for orbit_db_history_list_length and "
                    "orbit_db_oldest_transaction_seconds",
                    exc.args[-1],
                    extra={"action": "metrics.purge"},
                )
            else:
                log.warning(
                    "metrics: purge state not read: %s", exc, extra={"action": "metrics.purge"}
                )
            return
        except errors.Unavailable:  # no connection: /readyz says so; this scrape goes without
            return
        if row["history"] is not None:
            yield GaugeMetricFamily(
                "orbit_db_history_list_length",
                "InnoDB undo logs not yet purged; grows while a long transaction is open",
                value=int(row["history"]),
            )
        yield GaugeMetricFamily(
            "orbit_db_oldest_transaction_seconds",
            "Age of the oldest open InnoDB transaction on the database server",
            value=int(row["oldest_us"]) / 1e6,
        )
