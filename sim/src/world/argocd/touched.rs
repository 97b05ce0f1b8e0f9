//! The set of apps the controller looks at on its next tick: marked by its watch task and by
//! the AppProject checks (a changed project touches its apps), taken by the controller.

use std::collections::BTreeSet;

/// Apps the controller's watch delivered since its last tick (shared with the watch task).
#[derive(Clone, Debug, Default)]
pub struct Touched(std::sync::Arc<std::sync::Mutex<BTreeSet<String>>>);

impl Touched {
    /// Marks `app` for a look at the next tick.
    pub fn touch(&self, app: &str) {
        if !app.is_empty() {
            self.0
                .lock()
                .expect("touched lock poisoned")
                .insert(app.to_string());
        }
    }

    /// Takes the marked apps, leaving none.
    pub fn take(&self) -> BTreeSet<String> {
        std::mem::take(&mut self.0.lock().expect("touched lock poisoned"))
    }
}
