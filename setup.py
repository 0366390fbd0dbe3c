"""The build step setup.cfg cannot say: ship ``sql/`` (migrations and routines) inside the
package as ``orbit_shell/sql``, so that a plain ``pip install`` can migrate and check a
database. An editable install reads the repository's ``sql/`` where it is."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithSql(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            target = Path(self.build_lib) / "orbit_shell" / "sql"
            for part in ("migrations", "procedures"):
                self.copy_tree(f"sql/{part}", str(target / part))


setup(cmdclass={"build_py": BuildWithSql})
