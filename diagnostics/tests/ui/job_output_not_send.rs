// A job whose output is not `Send`: the error names the output.
use std::rc::Rc;

use loopguard::pool::Pool;

fn main() {
    let pool = Pool::builder().build().unwrap();
    let _job = pool.try_run(|| Rc::new(7));
}
