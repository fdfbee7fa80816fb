// A job closure that captures an `Rc`: the error names the capture, not `Fallible`.
use std::rc::Rc;

use loopguard::pool::Pool;

fn main() {
    let pool = Pool::builder().build().unwrap();
    let rows = Rc::new(vec![1, 2, 3]);
    let _job = pool.try_run(move || rows.len());
}
