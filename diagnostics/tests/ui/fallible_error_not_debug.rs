// A `Fallible` job whose error type is not `Debug`: the error says so and what to write.
use loopguard::Fallible;
use loopguard::pool::Pool;

struct NotDebug;

fn main() {
    let pool = Pool::builder().build().unwrap();
    let _job = pool.try_run(Fallible(|| Err::<u32, NotDebug>(NotDebug)));
}
