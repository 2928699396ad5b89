"""ament_python packaging: builds with colcon in a ROS 2 workspace and with pip in a venv."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "tt_sam3_ros"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml") + glob("config/*.rviz")),
    ],
    python_requires=">=3.10",
    install_requires=["setuptools", "numpy", "opencv-python-headless", "pillow", "scipy"],
    zip_safe=True,
    maintainer="tt_sam3_ros maintainers",
    maintainer_email="maintainers@tt-sam3-ros.invalid",
    url="https://github.com/tt-sam3/tt_sam3_ros",
    description="SAM 3 text-prompted instance segmentation as a ROS 2 node (Blackhole, CUDA, CPU).",
    license="Apache-2.0",
    # The torch engine's stack; pinned versions are in requirements/core.txt.
    extras_require={
        "torch": [
            "torch",
            "torchvision",
            "transformers>=5.17",
            "huggingface_hub",
            "safetensors",
            "tqdm",
            "open-clip-torch",
        ],
        "test": ["pytest"],
    },
    entry_points={
        "console_scripts": [
            f"sam3_node = {PACKAGE}.node:main",
            f"tt-sam3 = {PACKAGE}.cli:main",
        ],
    },
)
