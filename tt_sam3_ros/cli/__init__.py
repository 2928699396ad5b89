"""The ``tt-sam3`` command: segment images and track videos without ROS."""
