"""Package list for setuptools (everything else is in pyproject.toml).

The repository keeps the robot model notes, IK configs and the demo take in ``assets/`` beside the
package, where a newcomer looks for them; installed, they are the package data ``mocapline.assets``
(``mocapline.core.paths`` finds them in either place).
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["mocapline", "mocapline.*"]), "mocapline.assets"],
    package_dir={"mocapline.assets": "assets"},
    package_data={"mocapline.assets": ["**/*"], "mocapline.core.pb": ["*.pyi"],
                  "mocapline.robot": ["builds/*.toml", "policies/*.toml"],  # robot and policy descriptions
                  # the web viewer's page and the vendored three.js (served from the package)
                  "mocapline.services.viewer": ["static/*", "static/vendor/three/*"]},
)
