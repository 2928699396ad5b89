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
    # The ranges of requirements/core.txt (test/unit/test_requirements.py keeps them equal); the
    # locks in requirements/lock/ are what each tested platform installs.
    install_requires=[
        "setuptools",
        "numpy>=1.21.5,<3",
        "opencv-python-headless>=4.5.4.60,<6",
        "pillow>=9.1.0,<14",
        "scipy>=1.8.0,<2",
        "PyYAML>=6.0.1,<7",
    ],
    zip_safe=True,
    maintainer="tt_sam3_ros maintainers",
    maintainer_email="maintainers@tt-sam3-ros.invalid",
    url="https://github.com/tt-sam3/tt_sam3_ros",
    description="SAM 3 text-prompted instance segmentation as a ROS 2 node (Blackhole, CUDA, CPU).",
    license="Apache-2.0",
    # The torch engine's stack, as requirements/core.txt ranges it.
    extras_require={
        "torch": [
            "torch>=2.14.1,<3",
            "torchvision>=0.29.1,<1",
            "transformers>=5.17.0,<6",
            "huggingface_hub>=1.33.0,<2",
            "safetensors>=0.8.0,<1",
            "tokenizers>=0.23.3,<1",
            "tqdm>=4.70.1,<5",
            "open-clip-torch>=3.3.0,<4",
        ],
        "test": ["pytest"],
    },
    entry_points={
        "console_scripts": [
            f"sam3_node = {PACKAGE}.ros.main:main",
            f"tt-sam3 = {PACKAGE}.cli.main:main",
        ],
    },
)
