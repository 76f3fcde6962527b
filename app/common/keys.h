// The app's keys and mouse, one text for Help > Keys and the manual's KEYS section (no ImGui).
#pragma once

namespace difflens::app {

// One key or gesture a line: "KEYS<spaces>what it does" (columns aligned for a monospace window).
inline constexpr const char* kKeysText =
    "1-9, 0     views (View menu; 0: Why)\n"
    "S          split the view with the maps\n"
    "Tab        side panel\n"
    "L          lecture mode (large text)\n"
    "Up/Down    layer\n"
    "Left/Right head of the left model (Shift: the right model; Explain: steps)\n"
    "C          Continue: the left model writes on (Shift+C: the right model)\n"
    ", and .    the query to the previous / next token the model wrote\n"
    "Ctrl+L     edit the prompt (a click on it too; Esc or a click elsewhere ends)\n"
    "Ctrl+O     open a model\n"
    "Ctrl+E     export the maps shown\n"
    "F12        save the window as PNG\n"
    "Esc        leave Present (Explain)\n"
    "Token strip: click a token for the query, hover for a key, right-drag for the answer span.\n"
    "Maps: wheel zooms, drag pans, double-click resets, right-click exports.";

}  // namespace difflens::app
