// Before an export: remember the file component ROOT's link and the message box MESSAGE's content
// under KEY, so download_new.js clicks only a file written by this export.
() => {
  const a = document.querySelector(`${ROOT} a[download], ${ROOT} a[href*="file="]`);
  const m = MESSAGE && document.querySelector(MESSAGE);
  window[KEY] = { href: a ? a.href : null, message: m ? m.innerHTML : "" };
}
