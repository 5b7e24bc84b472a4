// WCAG 2 checks run in the page by tests/e2e/test_finops_page.py: visible HTML text whose contrast with its
// effective background is under 4.5:1 (3:1 for large text), and visible controls with no accessible name.
() => {
  const lum = (c) => {
    const [r, g, b] = c.map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const rgba = (s) => (s.match(/[\d.]+/g) || []).map(Number);
  const background = (el) => {
    for (; el; el = el.parentElement) {
      const c = rgba(getComputedStyle(el).backgroundColor);
      if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const low = [];
  for (const el of document.querySelectorAll("body *")) {
    if (el.closest("svg") || !el.checkVisibility()) continue;
    const text = [...el.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent.trim()).join("");
    if (!text) continue;
    const style = getComputedStyle(el);
    const [l1, l2] = [lum(rgba(style.color).slice(0, 3)), lum(background(el))];
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    const large = parseFloat(style.fontSize) >= 24 || (parseFloat(style.fontSize) >= 18.66 && Number(style.fontWeight) >= 700);
    if (ratio < (large ? 3 : 4.5)) low.push(`${el.tagName}.${el.className} "${text.slice(0, 30)}" ${ratio.toFixed(2)}`);
  }
  const unlabelled = [...document.querySelectorAll("input, select, textarea, button")]
    .filter((el) => el.checkVisibility() && !(el.labels?.length || el.getAttribute("aria-label") || el.textContent.trim()))
    .map((el) => el.id || el.outerHTML.slice(0, 60));
  return { low, unlabelled };
}
