// One click exports and downloads: once the export has put a new file into the file component ROOT
// (its link differs from the one there before the click, kept by download_mark.js under KEY), the link is
// clicked. It gives up when the message box MESSAGE shows a new warning or error, or after a minute.
async () => {
  const before = window[KEY];
  if (!before) return;
  const link = () => document.querySelector(`${ROOT} a[download], ${ROOT} a[href*="file="]`);
  for (let i = 0; i < 600; i++) {
    const a = link();
    if (a && a.href !== before.href) { window[KEY] = null; a.click(); return; }
    const m = MESSAGE && document.querySelector(MESSAGE);
    if (m && m.innerHTML !== before.message && m.querySelector(".rs-error, .rs-warn")) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  window[KEY] = null;
}
