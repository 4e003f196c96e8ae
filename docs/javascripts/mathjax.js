// MathJax 3 configuration, read before docs/assets/mathjax/tex-chtml.js loads (both served by the site itself).
// pymdownx.arithmatex (generic mode) wraps each formula in an element of class "arithmatex" with \( \) or \[ \]
// delimiters; MathJax typesets those elements and nothing else on the page.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
    packages: {"[-]": ["noundefined"]},  // an unknown macro is an error (mjx-merror), not red text: tests find it
  },
  chtml: {
    mtextInheritFont: true,  // \text{...} comments in the page's font: narrower, and they read as prose
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
};
