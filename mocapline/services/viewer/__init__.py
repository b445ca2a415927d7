"""viewer: MocapFrames in, validated and applied to the G1 in MuJoCo, shown in a window or a web page."""
