{
    "forced_down": %(forced_down)s
}
